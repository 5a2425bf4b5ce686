-- inbound_messages.content: the text of an inbound message
-- (schema.InboundRow.Content), written only when an operator switches
-- content storage on (--store-content); '' otherwise. 18.16 has no
-- ADD COLUMN IF NOT EXISTS: Apply takes "already exists" as done.
ALTER TABLE {{.Database}}.inbound_messages ADD COLUMN content String DEFAULT '';
