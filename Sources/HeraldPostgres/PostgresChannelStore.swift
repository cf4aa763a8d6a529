import FoundationEssentials
import HeraldCore

/// The broadcast channels Herald created, in table `channels` (schema step 9), beside the devices.
extension PostgresTokenStore: ChannelStore {
    func insertChannel(_ c: StoredChannel) async throws {
        try await pool.run { db in
            _ = try db.execute("""
                INSERT INTO channels (app, id, route, storage_policy, created_at) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (app, id) DO UPDATE SET route = excluded.route, storage_policy = excluded.storage_policy,
                    created_at = excluded.created_at
                """, [c.app, c.id, c.route, c.storagePolicy.rawValue, String(c.createdAt.millisecondsSince1970)])
        }
    }

    func channels(app: String) async throws -> [StoredChannel] {
        try await pool.run { db in
            let r = try db.execute("SELECT app, id, route, storage_policy, created_at FROM channels WHERE app = $1 ORDER BY created_at, id", [app])
            return (0..<r.count).map { i in
                StoredChannel(app: r.string(i, 0), id: r.string(i, 1), route: r.string(i, 2),
                              storagePolicy: ChannelStoragePolicy(rawValue: r.string(i, 3)) ?? .none,
                              createdAt: Date(millisecondsSince1970: r.int(i, 4)))
            }
        }
    }

    func channelCount(app: String, route: String) async throws -> Int {
        try await pool.run { db in
            Int(try db.execute("SELECT count(*) FROM channels WHERE app = $1 AND route = $2", [app, route]).int(0, 0))
        }
    }

    func removeChannel(app: String, id: String) async throws -> Bool {
        try await pool.run { db in
            try db.execute("DELETE FROM channels WHERE app = $1 AND id = $2", [app, id]).affected > 0
        }
    }
}
