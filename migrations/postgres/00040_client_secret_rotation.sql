-- +goose Up
-- Signing secrets are stored encrypted (AES-GCM under LOCKSTREAM_SECRET_KEY; the
-- application encrypts and decrypts, so the column keeps its text type: a value is
-- "lsenc1:" and the base64 of nonce and ciphertext, or a plaintext "whsec_…" secret
-- from before, which `lockstream api` encrypts when it starts). A rotation keeps the
-- previous secret until previous_secret_until, and webhooks are signed with both
-- meanwhile, so attempts already on their way still verify.
ALTER TABLE clients ADD COLUMN previous_secret text;
ALTER TABLE clients ADD COLUMN previous_secret_until timestamptz;

-- +goose Down
ALTER TABLE clients DROP COLUMN previous_secret_until;
ALTER TABLE clients DROP COLUMN previous_secret;
