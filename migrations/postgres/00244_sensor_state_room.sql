-- +goose Up
-- Issue 21 (WAL per webhook): at fillfactor 80 a page of sensor_state keeps
-- room for about 16 new row versions of its 65 rows, and a burst that changes
-- most sensors once (the pipeline benchmark's webhook phase: 20,000 changes)
-- filled the pages before pruning could free them: 13,500 of 18,000 updates
-- were not HOT, each with a new primary-key entry and a larger WAL record.
-- Half of each page is kept free: the table is small (about 100 bytes a
-- sensor), its rows are rewritten at every change.
ALTER TABLE sensor_state SET (fillfactor = 50);

-- +goose Down
ALTER TABLE sensor_state SET (fillfactor = 80);
