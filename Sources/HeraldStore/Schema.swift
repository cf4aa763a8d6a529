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
    ])
}
