import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldHTTP2

/// Builds one batch's HTTP/2 requests: one body and one shared header list per notification
/// (its deliveries carry the same payload and options), so a campaign's batch copies the
/// payload once and the client encodes the headers once; per request only `:path` and `apns-id`.
struct RequestShapes {
    /// A notification the APNs rules refuse before any request (its payload is too large).
    struct Refusal: Error {
        var reason: String
    }

    private struct Key: Equatable {
        var pushType: PushType
        var topic: String
        var priority: Int
        var expiration: Int64?
        var collapseID: String?
    }

    private struct Shape {
        var key: Key
        var source: [UInt8]
        var body: HTTP2Body
        var headers: [HTTP2Header]
    }

    /// `topic` from the transport's configuration, used instead of the app's.
    let topic: String?
    private var byNotification: [String: Shape] = [:]

    init(topic: String?) {
        self.topic = topic
    }

    /// The request for `delivery`, or why there is none.
    mutating func request(for delivery: Delivery) -> Result<HTTP2Request, Refusal> {
        let options = APNsSendOptions(delivery.payload)
        let pushType = options.pushType
        let payload = delivery.payload.body
        if payload.count > pushType.maxPayloadBytes {
            return .failure(Refusal(reason: "PayloadTooLarge: the payload is \(payload.count) bytes; APNs accepts at most \(pushType.maxPayloadBytes) for \(pushType.rawValue) notifications"))
        }
        let key = Key(pushType: pushType, topic: pushType.topic(forBundleID: topic ?? delivery.topic), priority: options.priority,
                      expiration: options.expiration, collapseID: options.collapseID)
        let shape: Shape
        if let known = byNotification[delivery.notificationID], known.key == key, known.source == payload {
            shape = known
        } else {
            var headers = [HTTP2Header("apns-push-type", key.pushType.rawValue), HTTP2Header("apns-topic", key.topic),
                           HTTP2Header("apns-priority", String(key.priority))]
            if let e = key.expiration { headers.append(HTTP2Header("apns-expiration", String(e))) }
            if let c = key.collapseID { headers.append(HTTP2Header("apns-collapse-id", c)) }
            shape = Shape(key: key, source: payload, body: HTTP2Body(payload), headers: headers)
            byNotification[delivery.notificationID] = shape
        }
        return .success(HTTP2Request(path: "/3/device/" + delivery.token, headers: shape.headers,
                                     ownHeaders: [HTTP2Header("apns-id", delivery.messageID.lowercasedString)], body: shape.body))
    }
}
