import FoundationEssentials
import HeraldCore

/// Apple's rules for a Live Activity payload (`apns-push-type: liveactivity`), as a pure check.
///
/// From "Starting and updating Live Activities with ActivityKit push notifications":
/// - `aps.event` is `start`, `update` or `end`;
/// - `aps.timestamp` is a whole number of seconds since 1970 (iOS drops an update older than
///   the one it shows);
/// - `aps.content-state` is an object (optional on `end`, which may keep the last state);
/// - `start` also needs `attributes-type` (a string), `attributes` (an object) and `alert`;
/// - `dismissal-date`, when present, is a whole number of seconds (meaningful on `end`);
/// - `stale-date` and `relevance-score` are numbers when present;
/// - a broadcast (channel) payload cannot start an activity.
///
/// Apple documents no `reason` for a payload that breaks these rules (APNs accepts it and the
/// device discards it); the simulator refuses it so the mistake shows in tests. See
/// ``APNsHTTP2Reason/badLiveActivityPayload``.
public enum LiveActivityPayloadRules {
    /// The first rule `body` breaks, as a sentence naming the field; `nil` when it keeps them all.
    public static func problem(_ body: UnsafeRawBufferPointer, broadcast: Bool = false) -> String? {
        guard let json = try? JSONValue.parse(Array(body)) else { return "the payload is not JSON" }
        return problem(json, broadcast: broadcast)
    }

    /// The first rule `payload` breaks; `nil` when it keeps them all.
    public static func problem(_ payload: JSONValue, broadcast: Bool = false) -> String? {
        guard let aps = payload["aps"]?.objectValue else { return "aps: missing (an object)" }
        guard let event = aps["event"]?.stringValue else { return "aps.event: missing (start, update or end)" }
        guard ["start", "update", "end"].contains(event) else {
            return "aps.event: expected start, update or end"
        }
        if broadcast && event == "start" { return "aps.event: a broadcast cannot start a Live Activity" }
        guard let timestamp = aps["timestamp"] else { return "aps.timestamp: missing (seconds since 1970)" }
        guard isWholeSeconds(timestamp) else { return "aps.timestamp: expected whole seconds since 1970" }
        if let state = aps["content-state"] {
            guard state.objectValue != nil else { return "aps.content-state: expected an object" }
        } else if event != "end" {
            return "aps.content-state: missing (an object)"
        }
        if event == "start" {
            guard let type = aps["attributes-type"] else { return "aps.attributes-type: missing on start" }
            guard let name = type.stringValue, !name.isEmpty else { return "aps.attributes-type: expected a type name" }
            guard let attributes = aps["attributes"] else { return "aps.attributes: missing on start" }
            guard attributes.objectValue != nil else { return "aps.attributes: expected an object" }
            guard aps["alert"] != nil else { return "aps.alert: missing on start" }
        }
        if let dismissal = aps["dismissal-date"], !isWholeSeconds(dismissal) {
            return "aps.dismissal-date: expected whole seconds since 1970"
        }
        if let stale = aps["stale-date"], !isWholeSeconds(stale) { return "aps.stale-date: expected whole seconds since 1970" }
        if let score = aps["relevance-score"], score.doubleValue == nil { return "aps.relevance-score: expected a number" }
        if let channel = aps["input-push-channel"], channel.stringValue?.isEmpty != false {
            return "aps.input-push-channel: expected a channel id"
        }
        return nil
    }

    private static func isWholeSeconds(_ value: JSONValue) -> Bool {
        guard let n = value.doubleValue else { return false }
        return n >= 0 && n == n.rounded() && n < 1e12
    }
}
