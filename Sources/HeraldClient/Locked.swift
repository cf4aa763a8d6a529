import Foundation

/// A value behind an `NSLock` (available on every platform the client builds for, unlike
/// `Synchronization.Mutex`, which needs iOS 18).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// A gate that opens once: ``wait()`` returns when it is open (at once, after ``open()``).
final class Latch: Sendable {
    private let state = Locked<(isOpen: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Opens the gate and lets every waiter go.
    func open() {
        let waiting = state.withLock { s in
            s.isOpen = true
            defer { s.waiters = [] }
            return s.waiters
        }
        waiting.forEach { $0.resume() }
    }

    /// Returns once the gate is open.
    func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let open: Bool = state.withLock { s in
                if s.isOpen { return true }
                s.waiters.append(c)
                return false
            }
            if open { c.resume() }
        }
    }
}

/// The most recent notification ids, at most `limit`, oldest evicted first.
struct RecentIDs: Sendable, Equatable {
    private(set) var order: [String]
    private var members: Set<String>
    let limit: Int

    init(_ ids: [String], limit: Int) {
        self.limit = max(1, limit)
        order = Array(ids.suffix(self.limit))
        members = Set(order)
    }

    func contains(_ id: String) -> Bool { members.contains(id) }

    /// Adds `id`. - Returns: false when it was already there.
    mutating func insert(_ id: String) -> Bool {
        guard members.insert(id).inserted else { return false }
        order.append(id)
        if order.count > limit {
            let drop = order.count - limit
            for old in order.prefix(drop) { members.remove(old) }
            order.removeFirst(drop)
        }
        return true
    }
}

/// The claims of a client token the client needs (`sub`, `device`), read without verifying
/// (the server verifies; the client only notices that the token is for someone else).
enum ClientTokenPeek {
    /// `sub/device` (the device lower-cased).
    static func owner(of token: String) -> String? {
        guard let claims = claims(token), let sub = claims["sub"] as? String else { return nil }
        return "\(sub)/\((claims["device"] as? String)?.lowercased() ?? "")"
    }

    /// The `exp` claim.
    static func expiry(of token: String) -> Date? {
        guard let exp = claims(token)?["exp"] as? NSNumber else { return nil }
        return Date(timeIntervalSince1970: exp.doubleValue)
    }

    private static func claims(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var b64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while b64.count % 4 != 0 { b64 += "=" }
        guard let data = Data(base64Encoded: b64) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}
