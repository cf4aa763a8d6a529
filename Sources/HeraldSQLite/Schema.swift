/// Herald's SQLite schema, as ordered migrations (see ``SQLiteMigrations``).
///
/// Times are milliseconds since 1970 (UTC). Never edit a shipped step; append a new one.
public enum HeraldSchema {
    public static let migrations = SQLiteMigrations([
        // 1: devices.
        """
        CREATE TABLE devices (
            app TEXT NOT NULL,
            token TEXT NOT NULL,
            user TEXT NOT NULL,
            transport TEXT NOT NULL,
            environment TEXT NOT NULL CHECK (environment IN ('sandbox', 'production')),
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            invalidated_at INTEGER,
            invalidation_reason TEXT,
            PRIMARY KEY (app, token)
        ) WITHOUT ROWID;
        CREATE INDEX devices_by_user ON devices (app, user, updated_at DESC);
        CREATE INDEX devices_invalidated ON devices (invalidated_at) WHERE invalidated_at IS NOT NULL;
        """,
        // 2: the daemon's durable queue (SQLiteDeliveryQueue).
        """
        CREATE TABLE notifications (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            app TEXT NOT NULL,
            topic TEXT NOT NULL,
            content TEXT NOT NULL,
            idempotency_key TEXT,
            deliveries INTEGER NOT NULL,
            created_at INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX notifications_idempotency ON notifications (app, idempotency_key)
            WHERE idempotency_key IS NOT NULL;
        CREATE TABLE deliveries (
            id INTEGER PRIMARY KEY,
            notification INTEGER NOT NULL,
            token TEXT NOT NULL,
            user TEXT,
            environment TEXT NOT NULL,
            transport TEXT,
            state TEXT NOT NULL CHECK (state IN ('queued', 'sent', 'delivered', 'failed', 'invalid_token', 'rejected', 'expired')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at INTEGER,
            lease_until INTEGER,
            last_reason TEXT,
            apns_id TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        );
        CREATE INDEX deliveries_by_notification ON deliveries (notification);
        CREATE INDEX deliveries_due ON deliveries (transport, next_attempt_at, id) WHERE state = 'queued';
        CREATE INDEX deliveries_claimed ON deliveries (transport, lease_until) WHERE state = 'sent';
        """,
        // 3: local delivery: a delivery waiting for its device's stream is `queued` with
        // `parked` set (reported as `parked`), due again at its grace or inbox TTL; `fallback`
        // names the transport that takes over when its route cannot reach the device.
        """
        ALTER TABLE deliveries ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE deliveries ADD COLUMN fallback TEXT;
        CREATE INDEX deliveries_parked ON deliveries (transport, token) WHERE parked = 1;
        """,
        // 4: the inbox log (SQLiteInboxStore): events written to streams, numbered per (app, user).
        """
        CREATE TABLE inbox (
            app TEXT NOT NULL,
            user TEXT NOT NULL,
            seq INTEGER NOT NULL,
            device TEXT NOT NULL,
            notification TEXT NOT NULL,
            event BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (app, user, seq)
        ) WITHOUT ROWID;
        CREATE INDEX inbox_by_device ON inbox (app, user, device, seq);
        CREATE INDEX inbox_by_age ON inbox (app, created_at);
        CREATE TABLE inbox_sequences (
            app TEXT NOT NULL,
            user TEXT NOT NULL,
            seq INTEGER NOT NULL,
            PRIMARY KEY (app, user)
        ) WITHOUT ROWID;
        """,
        // 5: one core for every platform. A device's environment becomes an attribute of its
        // plugin (`attributes`, a JSON object of strings; APNs devices keep theirs as
        // {"environment": …}); a delivery's `apns_id` becomes its neutral `message_id`, with
        // the platform's own `receipt` beside it; deliveries no longer copy the environment.
        """
        ALTER TABLE devices ADD COLUMN attributes TEXT;
        UPDATE devices SET attributes = '{"environment":"' || environment || '"}';
        ALTER TABLE devices DROP COLUMN environment;
        ALTER TABLE deliveries DROP COLUMN environment;
        ALTER TABLE deliveries RENAME COLUMN apns_id TO message_id;
        ALTER TABLE deliveries ADD COLUMN receipt TEXT;
        """,
        // 6: a browser's push subscription linked to its page's stream (POST /v1/stream/subscription):
        // `stream_device` is the installation id its local deliveries are written to, numbered
        // in the inbox under and unparked by (NULL: the token is the stream's device).
        """
        ALTER TABLE deliveries ADD COLUMN stream_device TEXT;
        CREATE INDEX deliveries_parked_stream ON deliveries (transport, stream_device) WHERE parked = 1;
        """,
        // 7: every attempt on record: `history`, a JSON array of the delivery's last attempts
        // (DeliveryAttempt.storedJSON, at most DeliveryAttempt.kept), appended by the write that
        // records each outcome; NULL for a delivery not tried since.
        """
        ALTER TABLE deliveries ADD COLUMN history TEXT;
        """,
        // 8: the broadcast channels Herald created (POST /v1/channels), per app, with the route
        // they were created through and their storage policy ('none' or 'most_recent').
        """
        CREATE TABLE channels (
            app TEXT NOT NULL,
            id TEXT NOT NULL,
            route TEXT NOT NULL,
            storage_policy TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (app, id)
        ) WITHOUT ROWID;
        CREATE INDEX channels_by_route ON channels (app, route);
        """,
        // 9: the event outbox (issue 38): every event, in order (`seq` never reused), kept for
        // `events.retention`; and each webhook's cursor (the last event it acknowledged) with the
        // lease of the node sending to it.
        """
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL,
            type TEXT NOT NULL,
            app TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_by_age ON events (created_at);
        CREATE TABLE webhook_cursors (
            webhook TEXT PRIMARY KEY,
            acknowledged INTEGER NOT NULL,
            holder TEXT,
            lease_until INTEGER
        ) WITHOUT ROWID;
        """,
    ])
}
