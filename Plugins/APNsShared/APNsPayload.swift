import HeraldCore

/// Builds the APNs JSON payload (`{"aps":{…}, "herald_id": …, <custom keys>}`) of a notification.
///
/// The payload is the same for every device a notification fans out to, so it is built once
/// per notification. Transports check its size against ``PushType/maxPayloadBytes``.
///
/// Rendered for a route, it carries the Herald notification id beside `aps` as
/// ``notificationIDKey`` (`"herald_id"`): a notification that reaches an app both down its live
/// stream (whose events carry the same id) and by push is shown once. The key is reserved: a
/// notification whose `data` sets it is refused at accept (``APNsRoute/render(_:context:)``).
///
/// A `widgets` push carries `"content-changed": true` in `aps` (WidgetKit reloads the widget's
/// timelines on it); it is added for that push type, so a widget push needs no other content.
public enum APNsPayload {
    /// The custom key that carries the Herald notification id (`GET /v1/notifications/{id}`).
    public static let notificationIDKey = "herald_id"

    /// The payload bytes for `content`, with `notificationID` as ``notificationIDKey`` when given.
    public static func encode(_ content: NotificationContent, notificationID: String? = nil) -> [UInt8] {
        let o = content.effectiveAPNs
        return encode(content, options: o, pushType: content.pushType(o), notificationID: notificationID)
    }

    /// The payload bytes for `content` with its APNs options (the block with the neutral fields
    /// filled in), with `notificationID` as ``notificationIDKey`` when given.
    public static func encode(_ content: NotificationContent, options o: APNsOptions, pushType: PushType,
                              notificationID: String? = nil) -> [UInt8] {
        var w = JSONWriter(capacity: 256)
        let launch = o.launchImage
        var alert = content.alert
        if launch != nil, case .text(let body)? = alert { alert = .fields(Alert(body: body)) }
        w.object { root in
            root.object("aps") { aps in
                switch alert {
                case .text(let s)?: aps.string("alert", s)
                case .fields(let a)?:
                    aps.object("alert") { a2 in
                        a2.string("title", a.title)
                        a2.string("subtitle", a.subtitle)
                        a2.string("body", a.body)
                        a2.string("launch-image", launch)
                        a2.string("title-loc-key", a.titleLocKey)
                        a2.stringArray("title-loc-args", a.titleLocArgs)
                        a2.string("subtitle-loc-key", a.subtitleLocKey)
                        a2.stringArray("subtitle-loc-args", a.subtitleLocArgs)
                        a2.string("loc-key", a.locKey)
                        a2.stringArray("loc-args", a.locArgs)
                    }
                case nil: break
                }
                aps.int("badge", content.badge)
                switch content.sound {
                case .named(let name)?: aps.string("sound", name)
                case .critical(let name, let volume)?:
                    aps.object("sound") { s in
                        s.int("critical", 1)
                        s.string("name", name)
                        s.double("volume", volume)
                    }
                case nil: break
                }
                aps.string("thread-id", o.threadID)
                aps.string("category", o.category)
                if o.contentAvailable { aps.int("content-available", 1) }
                if o.mutableContent { aps.int("mutable-content", 1) }
                if pushType == .widgets { aps.bool("content-changed", true) }
                aps.string("target-content-id", o.targetContentID)
                aps.string("interruption-level", o.interruptionLevel?.rawValue)
                aps.double("relevance-score", o.relevanceScore)
                aps.string("filter-criteria", o.filterCriteria)
                if let live = o.liveActivity {
                    aps.int64("timestamp", live.timestamp)
                    aps.string("event", live.event.rawValue)
                    aps.value("content-state", live.contentState)
                    aps.int64("stale-date", live.staleDate)
                    aps.int64("dismissal-date", live.dismissalDate)
                    aps.string("attributes-type", live.attributesType)
                    aps.value("attributes", live.attributes)
                    aps.string("input-push-channel", live.inputPushChannel)
                }
            }
            root.string(notificationIDKey, notificationID)
            for key in content.data.keys.sorted() where key != "aps" && key != notificationIDKey {
                root.value(key, content.data[key])
            }
        }
        return w.bytes
    }
}
