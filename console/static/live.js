// The console's live view: follows /console/live/events (Server-Sent Events) and
// puts each event at the top of the table, keeping the newest 200. Text goes in
// through textContent only, never as HTML.
'use strict';
(function () {
  const table = document.getElementById('live-events');
  if (!table) {
    return;
  }
  const body = table.tBodies[0];
  const status = document.getElementById('live-status');
  const keep = 200;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function addCell(row, text) {
    row.insertCell().textContent = text;
  }

  function trim() {
    while (body.rows.length > keep) {
      body.deleteRow(-1);
    }
  }

  const source = new EventSource(table.dataset.stream);
  source.addEventListener('ready', function () {
    setStatus('connected', 'connected');
  });
  source.addEventListener('error', function () {
    setStatus('reconnecting', 'reconnecting…');
  });
  source.addEventListener('dropped', function (m) {
    const row = body.insertRow(0);
    row.className = 'dropped';
    const cell = row.insertCell();
    cell.colSpan = 4;
    cell.textContent = m.data + ' events skipped: this view did not keep up';
    trim();
  });
  source.addEventListener('event', function (m) {
    const e = JSON.parse(m.data);
    const row = body.insertRow(0);
    row.className = 'type-' + e.type + ' fresh';
    row.dataset.eventId = e.id;
    row.dataset.sensor = e.sensor_id;
    addCell(row, new Date(e.at).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC'));
    const link = document.createElement('a');
    link.href = '/console/sensors/' + encodeURIComponent(e.sensor_id);
    link.textContent = e.sensor_id;
    row.insertCell().appendChild(link);
    addCell(row, e.type.replace(/_/g, ' '));
    addCell(row, e.state);
    trim();
  });
  window.addEventListener('pagehide', function () {
    source.close();
  });
})();
