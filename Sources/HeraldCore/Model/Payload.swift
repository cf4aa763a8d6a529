/// Builds the APNs JSON payload (`{"aps":{…}, <custom keys>}`) of a notification.
///
/// The payload is the same for every device a notification fans out to, so it is built once
/// per notification. Transports check its size against ``PushType/maxPayloadBytes``.
///
/// A `widgets` push carries `"content-changed": true` in `aps` (WidgetKit reloads the widget's
/// timelines on it); it is added for that push type, so a widget push needs no other content.
public enum APNsPayload {
    /// The payload bytes for `content`.
    public static func encode(_ content: NotificationContent) -> [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.object { root in
            root.object("aps") { aps in
                switch content.alert {
                case .text(let s)?: aps.string("alert", s)
                case .fields(let a)?:
                    aps.object("alert") { o in
                        o.string("title", a.title)
                        o.string("subtitle", a.subtitle)
                        o.string("body", a.body)
                        o.string("launch-image", a.launchImage)
                        o.string("title-loc-key", a.titleLocKey)
                        o.stringArray("title-loc-args", a.titleLocArgs)
                        o.string("subtitle-loc-key", a.subtitleLocKey)
                        o.stringArray("subtitle-loc-args", a.subtitleLocArgs)
                        o.string("loc-key", a.locKey)
                        o.stringArray("loc-args", a.locArgs)
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
                let o = content.apns
                aps.string("thread-id", o.threadID)
                aps.string("category", o.category)
                if o.contentAvailable { aps.int("content-available", 1) }
                if o.mutableContent { aps.int("mutable-content", 1) }
                if content.pushType == .widgets { aps.bool("content-changed", true) }
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
                }
            }
            for key in content.data.keys.sorted() where key != "aps" {
                root.value(key, content.data[key])
            }
        }
        return w.bytes
    }
}
