import Foundation

/// A notification as Herald's live stream delivers it: the `data:` of an `event: notification`
/// (`{"id","app","alert","badge","sound","data","created_at"}`) and the event's id.
public struct HeraldNotification: Sendable, Hashable {
    /// What the notification shows. The API's `alert` is either a string (the body) or an object.
    public struct Alert: Sendable, Hashable, Codable {
        /// `title`.
        public var title: String?
        /// `subtitle`.
        public var subtitle: String?
        /// `body` (or the whole `alert` when it is a string).
        public var body: String?
        /// `launch_image`.
        public var launchImage: String?
        /// `title_loc_key`: a key of the app's `Localizable.strings` for the title.
        public var titleLocKey: String?
        /// `title_loc_args`: the title's format arguments.
        public var titleLocArgs: [String]?
        /// `subtitle_loc_key`.
        public var subtitleLocKey: String?
        /// `subtitle_loc_args`.
        public var subtitleLocArgs: [String]?
        /// `loc_key`: a key of `Localizable.strings` for the body.
        public var locKey: String?
        /// `loc_args`: the body's format arguments.
        public var locArgs: [String]?

        /// Creates an alert.
        public init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
        }

        enum CodingKeys: String, CodingKey {
            case title, subtitle, body
            case launchImage = "launch_image"
            case titleLocKey = "title_loc_key", titleLocArgs = "title_loc_args"
            case subtitleLocKey = "subtitle_loc_key", subtitleLocArgs = "subtitle_loc_args"
            case locKey = "loc_key", locArgs = "loc_args"
        }

        /// Decodes the API's `alert`: a string (the body) or an object with the fields above.
        public init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                self.init(body: text)
                return
            }
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.init(title: try c.decodeIfPresent(String.self, forKey: .title),
                      subtitle: try c.decodeIfPresent(String.self, forKey: .subtitle),
                      body: try c.decodeIfPresent(String.self, forKey: .body))
            launchImage = try c.decodeIfPresent(String.self, forKey: .launchImage)
            titleLocKey = try c.decodeIfPresent(String.self, forKey: .titleLocKey)
            titleLocArgs = try c.decodeIfPresent([String].self, forKey: .titleLocArgs)
            subtitleLocKey = try c.decodeIfPresent(String.self, forKey: .subtitleLocKey)
            subtitleLocArgs = try c.decodeIfPresent([String].self, forKey: .subtitleLocArgs)
            locKey = try c.decodeIfPresent(String.self, forKey: .locKey)
            locArgs = try c.decodeIfPresent([String].self, forKey: .locArgs)
        }

        /// The title to show: `title`, else `title_loc_key` looked up in `bundle` with its
        /// arguments substituted (``Alert/localized(_:_:bundle:)``).
        public func displayTitle(bundle: Bundle = .main) -> String? {
            title ?? titleLocKey.map { Self.localized($0, titleLocArgs ?? [], bundle: bundle) }
        }

        /// The subtitle to show (as ``displayTitle(bundle:)``).
        public func displaySubtitle(bundle: Bundle = .main) -> String? {
            subtitle ?? subtitleLocKey.map { Self.localized($0, subtitleLocArgs ?? [], bundle: bundle) }
        }

        /// The body to show (as ``displayTitle(bundle:)``, with `loc_key` and `loc_args`).
        public func displayBody(bundle: Bundle = .main) -> String? {
            body ?? locKey.map { Self.localized($0, locArgs ?? [], bundle: bundle) }
        }

        /// `key` looked up in `bundle`'s `Localizable.strings` (the key itself when absent), with
        /// `%@` replaced by the arguments in order and `%n$@` by the n-th, and `%%` by `%`, as
        /// APNs does for `loc-key`.
        public static func localized(_ key: String, _ arguments: [String], bundle: Bundle = .main) -> String {
            let format = bundle.localizedString(forKey: key, value: key, table: nil)
            var out = "", next = 0
            var i = format.startIndex
            while i < format.endIndex {
                let c = format[i]
                guard c == "%" else { out.append(c); i = format.index(after: i); continue }
                let rest = format[format.index(after: i)...]
                if rest.hasPrefix("%") { out.append("%"); i = format.index(i, offsetBy: 2); continue }
                if rest.hasPrefix("@") {
                    if next < arguments.count { out += arguments[next] }
                    next += 1
                    i = format.index(i, offsetBy: 2)
                    continue
                }
                let digits = rest.prefix { $0.isASCII && $0.isNumber }
                if !digits.isEmpty, rest.dropFirst(digits.count).hasPrefix("$@"), let n = Int(digits), n >= 1 {
                    if n <= arguments.count { out += arguments[n - 1] }
                    i = format.index(i, offsetBy: 1 + digits.count + 2)
                    continue
                }
                out.append(c)
                i = format.index(after: i)
            }
            return out
        }
    }

    /// The notification's sound: a file name (`"default"` for the system sound) or a critical alert.
    public enum Sound: Sendable, Hashable {
        /// A sound file of the app's bundle, or `"default"`.
        case named(String)
        /// A critical alert's sound (`{"critical": true, "name", "volume"}`); `volume` from 0 to 1.
        case critical(name: String?, volume: Double?)
    }

    /// The Herald notification id (the same id a push for it carries under
    /// ``HeraldClient/notificationIDKey``): the key of de-duplication.
    public var id: String
    /// The app id.
    public var app: String
    /// The stream's event id (`id:`), numbered per (app, user): what acknowledgements and
    /// `Last-Event-ID` carry. `nil` when the event had no numeric id.
    public var eventID: Int64?
    /// What to show, if anything.
    public var alert: Alert?
    /// The app icon's badge number to set, if any.
    public var badge: Int?
    /// The sound to play, if any.
    public var sound: Sound?
    /// The sender's custom `data`, as sent.
    public var data: [String: HeraldJSON]
    /// When Herald accepted the notification.
    public var createdAt: Date?

    /// Creates a notification.
    public init(id: String, app: String, eventID: Int64? = nil, alert: Alert? = nil, badge: Int? = nil, sound: Sound? = nil,
                data: [String: HeraldJSON] = [:], createdAt: Date? = nil) {
        self.id = id
        self.app = app
        self.eventID = eventID
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.data = data
        self.createdAt = createdAt
    }

    /// What a local notification's `userInfo` holds: the `data` members, and the Herald id under
    /// ``HeraldClient/notificationIDKey`` (as a push from Herald carries it).
    public var userInfo: [String: Any] {
        var info = data.mapValues(\.foundationValue)
        info[HeraldClient.notificationIDKey] = id
        return info
    }

    /// Decodes a `notification` event's `data:`.
    /// - Throws: ``HeraldClientError/invalidEvent(_:)`` naming the field that is missing or of the wrong type.
    public static func decode(_ json: String, eventID: Int64?) throws(HeraldClientError) -> HeraldNotification {
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(json.utf8))
        } catch let DecodingError.keyNotFound(key, _) {
            throw .invalidEvent("event \(eventID.map(String.init) ?? "-"): no \"\(key.stringValue)\" field")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw .invalidEvent("event \(eventID.map(String.init) ?? "-"): \(path): \(context.debugDescription)")
        } catch {
            throw .invalidEvent("event \(eventID.map(String.init) ?? "-"): not a notification object: \(error)")
        }
        var n = HeraldNotification(id: wire.id, app: wire.app, eventID: eventID, alert: wire.alert, badge: wire.badge,
                                   data: wire.data ?? [:])
        switch wire.sound {
        case .string(let name)?: n.sound = .named(name)
        case .object(let o)?:
            let volume: Double?
            switch o["volume"] {
            case .double(let d)?: volume = d
            case .int(let i)?: volume = Double(i)
            default: volume = nil
            }
            n.sound = .critical(name: o["name"]?.stringValue, volume: volume)
        case nil, .null?: break
        default: throw .invalidEvent("event \(eventID.map(String.init) ?? "-"): sound: expected a string or an object")
        }
        if let created = wire.createdAt {
            n.createdAt = (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(created))
                ?? (try? Date.ISO8601FormatStyle().parse(created))
        }
        return n
    }

    private struct Wire: Decodable {
        var id: String
        var app: String
        var alert: Alert?
        var badge: Int?
        var sound: HeraldJSON?
        var data: [String: HeraldJSON]?
        var createdAt: String?
        enum CodingKeys: String, CodingKey {
            case id, app, alert, badge, sound, data
            case createdAt = "created_at"
        }
    }
}
