import FoundationEssentials
import HeraldCore

/// The broadcast channels Herald created, in table `channels` (schema step 8), beside the devices.
extension SQLiteTokenStore: ChannelStore {
    public func insertChannel(_ c: StoredChannel) async throws {
        try await onThread { [self] in
            try db.withStatement("""
                INSERT INTO channels (app, id, route, storage_policy, created_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (app, id) DO UPDATE SET route = excluded.route, storage_policy = excluded.storage_policy,
                    created_at = excluded.created_at
                """) { s in
                s.bind(1, c.app).bind(2, c.id).bind(3, c.route).bind(4, c.storagePolicy.rawValue).bind(5, c.createdAt.millisecondsSince1970)
                try s.run()
            }
        }
    }

    public func channels(app: String) async throws -> [StoredChannel] {
        try await onThread { [self] in
            try db.withStatement("SELECT app, id, route, storage_policy, created_at FROM channels WHERE app = ? ORDER BY created_at, id") { s in
                s.bind(1, app)
                var result: [StoredChannel] = []
                while try s.step() {
                    result.append(StoredChannel(app: s.string(0), id: s.string(1), route: s.string(2),
                                                storagePolicy: ChannelStoragePolicy(rawValue: s.string(3)) ?? .none,
                                                createdAt: Date(millisecondsSince1970: s.int64(4))))
                }
                return result
            }
        }
    }

    public func channelCount(app: String, route: String) async throws -> Int {
        try await onThread { [self] in
            try db.withStatement("SELECT count(*) FROM channels WHERE app = ? AND route = ?") { s in
                s.bind(1, app).bind(2, route)
                return try s.step() ? Int(s.int64(0)) : 0
            }
        }
    }

    public func removeChannel(app: String, id: String) async throws -> Bool {
        try await onThread { [self] in
            try db.withStatement("DELETE FROM channels WHERE app = ? AND id = ?") { s in
                s.bind(1, app).bind(2, id)
                try s.run()
            }
            return db.changes > 0
        }
    }
}
