import FoundationEssentials
import HeraldCore

/// Herald's PostgreSQL schema, as ordered migrations applied under an advisory lock (two nodes
/// starting at once on an empty database: one migrates, the other waits and finds it done).
///
/// Times are milliseconds since 1970 (UTC), as in the SQLite schema. Never edit a shipped step;
/// append a new one.
enum PostgresSchema {
    /// Advisory lock keys (`pg_advisory_lock`), one per job.
    enum Lock: Int64 {
        case migrate = 7_304_512_001
        case housekeeping = 7_304_512_002
        /// Held by the transaction that numbers new events, to its commit (``PostgresEvents``).
        case events = 7_304_512_003
    }

    /// The channel of `LISTEN/NOTIFY` wake-ups; the payload is a transport name.
    static let channel = "herald_queue"

    /// The channel of presence changes; the payload is the node that changed its streams.
    static let presenceChannel = "herald_presence"

    static let steps: [String] = [
        // 1: devices, notifications, deliveries.
        """
        CREATE TABLE devices (
            app TEXT NOT NULL,
            token TEXT NOT NULL,
            "user" TEXT NOT NULL,
            transport TEXT NOT NULL,
            environment TEXT NOT NULL CHECK (environment IN ('sandbox', 'production')),
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            invalidated_at BIGINT,
            invalidation_reason TEXT,
            PRIMARY KEY (app, token)
        );
        CREATE INDEX devices_by_user ON devices (app, "user", updated_at DESC);
        CREATE INDEX devices_invalidated ON devices (invalidated_at) WHERE invalidated_at IS NOT NULL;
        CREATE TABLE notifications (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            app TEXT NOT NULL,
            topic TEXT NOT NULL,
            content TEXT NOT NULL,
            idempotency_key TEXT,
            deliveries INTEGER NOT NULL,
            created_at BIGINT NOT NULL
        );
        CREATE UNIQUE INDEX notifications_idempotency ON notifications (app, idempotency_key)
            WHERE idempotency_key IS NOT NULL;
        CREATE INDEX notifications_created ON notifications (created_at);
        CREATE TABLE deliveries (
            id BIGSERIAL PRIMARY KEY,
            notification BIGINT NOT NULL REFERENCES notifications (seq) ON DELETE CASCADE,
            token TEXT NOT NULL,
            "user" TEXT,
            environment TEXT NOT NULL,
            transport TEXT,
            state TEXT NOT NULL CHECK (state IN ('queued', 'sent', 'delivered', 'failed', 'invalid_token', 'rejected', 'expired')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at BIGINT,
            lease_until BIGINT,
            claimed_by TEXT,
            last_reason TEXT,
            apns_id TEXT NOT NULL,
            updated_at BIGINT NOT NULL
        );
        CREATE INDEX deliveries_by_notification ON deliveries (notification);
        CREATE INDEX deliveries_due ON deliveries (transport, next_attempt_at, id) WHERE state = 'queued';
        CREATE INDEX deliveries_claimed ON deliveries (lease_until) WHERE state = 'sent';
        """,
        // 2: local delivery (see the SQLite schema's step 3): `parked` and `fallback`.
        """
        ALTER TABLE deliveries ADD COLUMN parked BOOLEAN NOT NULL DEFAULT false;
        ALTER TABLE deliveries ADD COLUMN fallback TEXT;
        CREATE INDEX deliveries_parked ON deliveries (transport, token) WHERE parked;
        """,
        // 3: the inbox log (PostgresInboxStore): events written to streams, numbered per (app, user).
        """
        CREATE TABLE inbox (
            app TEXT NOT NULL,
            "user" TEXT NOT NULL,
            seq BIGINT NOT NULL,
            device TEXT NOT NULL,
            notification TEXT NOT NULL,
            event BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (app, "user", seq)
        );
        CREATE INDEX inbox_by_device ON inbox (app, "user", device, seq);
        CREATE INDEX inbox_by_age ON inbox (app, created_at);
        CREATE TABLE inbox_sequences (
            app TEXT NOT NULL,
            "user" TEXT NOT NULL,
            seq BIGINT NOT NULL,
            PRIMARY KEY (app, "user")
        );
        """,
        // 4: presence (PostgresPresence): which node each device's live stream is open on.
        """
        CREATE TABLE presence (
            app TEXT NOT NULL,
            device TEXT NOT NULL,
            node TEXT NOT NULL,
            "user" TEXT NOT NULL,
            transport TEXT NOT NULL,
            seen TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (app, device, node)
        );
        CREATE INDEX presence_by_device ON presence (transport, device)
        """,
        // 5: less work per delivery row. No foreign key from deliveries to notifications (each
        // insert checked it and locked the notification's row; prune deletes both explicitly).
        // The lease index keyed on `lease_until IS NOT NULL` (the same rows: only a `sent` row
        // holds a lease) rather than `state = 'sent'`: with the old predicate the planner read
        // every claimed row (the whole in-flight backlog) for each batch of outcomes instead of
        // looking the batch up by id. `accepted_by`: the node that accepted a delivery claims it
        // first (PostgresDeliveryQueue.affinity); NULL for rows from before, which any node takes.
        """
        ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_notification_fkey;
        DROP INDEX IF EXISTS deliveries_claimed;
        CREATE INDEX deliveries_leased ON deliveries (lease_until) WHERE lease_until IS NOT NULL;
        ALTER TABLE deliveries ADD COLUMN accepted_by TEXT
        """,
        // 6: one core for every platform (see the SQLite schema's step 5): the environment
        // becomes the APNs plugin's device attribute, `apns_id` the neutral `message_id` with
        // the platform's `receipt` beside it.
        """
        ALTER TABLE devices ADD COLUMN attributes TEXT;
        UPDATE devices SET attributes = '{"environment":"' || environment || '"}';
        ALTER TABLE devices DROP COLUMN environment;
        ALTER TABLE deliveries DROP COLUMN environment;
        ALTER TABLE deliveries RENAME COLUMN apns_id TO message_id;
        ALTER TABLE deliveries ADD COLUMN receipt TEXT
        """,
        // 7: a browser's push subscription linked to its page's stream (see the SQLite schema's
        // step 6): `stream_device`, the installation id its local deliveries are keyed by.
        """
        ALTER TABLE deliveries ADD COLUMN stream_device TEXT;
        CREATE INDEX deliveries_parked_stream ON deliveries (transport, stream_device) WHERE parked
        """,
        // 8: every attempt on record (see the SQLite schema's step 7): `history`, the delivery's
        // last attempts, appended by the statement that records each outcome.
        """
        ALTER TABLE deliveries ADD COLUMN history JSONB
        """,
        // 9: the broadcast channels Herald created (see the SQLite schema's step 8).
        """
        CREATE TABLE channels (
            app TEXT NOT NULL,
            id TEXT NOT NULL,
            route TEXT NOT NULL,
            storage_policy TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            PRIMARY KEY (app, id)
        );
        CREATE INDEX channels_by_route ON channels (app, route)
        """,
        // 10: the event outbox (issue 38; see the SQLite schema's step 9), each webhook's cursor
        // and lease. An event is inserted without a number (`seq` NULL) in the transaction it
        // reports; readers number committed ones in order (PostgresEvents.number), so numbers
        // are visible in increasing order and a reader never skips one.
        """
        CREATE TABLE events (
            pos BIGSERIAL PRIMARY KEY,
            seq BIGINT UNIQUE,
            id TEXT NOT NULL,
            type TEXT NOT NULL,
            app TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_by_age ON events (created_at);
        CREATE INDEX events_unnumbered ON events (pos) WHERE seq IS NULL;
        CREATE TABLE events_sequence (last BIGINT NOT NULL);
        INSERT INTO events_sequence VALUES (0);
        CREATE TABLE webhook_cursors (
            webhook TEXT PRIMARY KEY,
            acknowledged BIGINT NOT NULL,
            holder TEXT,
            lease_until BIGINT
        )
        """,
    ]

    /// The schema version of the database (0: none yet).
    static func version(_ db: PGConnection) throws -> Int {
        let exists = try db.execute("SELECT to_regclass('herald_schema') IS NOT NULL")
        guard exists.string(0, 0) == "t" else { return 0 }
        return Int(try db.execute("SELECT coalesce(max(version), 0) FROM herald_schema").int(0, 0))
    }

    /// Applies missing steps under the migration lock; returns (before, after) versions.
    @discardableResult
    static func migrate(_ db: PGConnection) throws -> (from: Int, to: Int) {
        try db.execute("SELECT pg_advisory_lock($1)", [String(Lock.migrate.rawValue)])
        defer { _ = try? db.execute("SELECT pg_advisory_unlock($1)", [String(Lock.migrate.rawValue)]) }
        try db.execute("CREATE TABLE IF NOT EXISTS herald_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        let from = try version(db)
        if from > steps.count {
            throw StoreError("the database's schema is version \(from), newer than this Herald's \(steps.count); run a newer Herald")
        }
        for (i, step) in steps.enumerated() where i + 1 > from {
            try db.transaction {
                for statement in step.split(separator: ";").map({ String($0).trimmed }) where !statement.isEmpty {
                    try db.execute(statement)
                }
                try db.execute("INSERT INTO herald_schema (version) VALUES ($1)", [String(i + 1)])
            }
        }
        return (from, steps.count)
    }
}
