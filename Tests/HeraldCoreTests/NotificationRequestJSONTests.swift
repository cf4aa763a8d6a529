import Foundation
import HeraldAPNs
import HeraldCore
import Testing

/// The API's notification body: strict reading with field paths, and the stored form.
struct NotificationRequestJSONTests {
    func parse(_ text: String) throws -> NotificationRequest {
        try NotificationRequest.fromAPI(try JSONValue.parse(text))
    }

    func issues(_ text: String) -> [JSONIssue] {
        do { _ = try parse(text); return [] } catch let e as RequestIssues { return e.issues } catch { return [JSONIssue(path: "?", message: "\(error)")] }
    }

    @Test func readsEveryField() throws {
        let r = try parse("""
        {"app":"a","users":["u1","u2"],"tokens":["t1"],"environment":"sandbox","idempotency_key":"k",
         "alert":{"title":"T","subtitle":"S","body":"B","launch_image":"L","title_loc_key":"tk","title_loc_args":["x"],
                  "subtitle_loc_key":"sk","subtitle_loc_args":["y"],"loc_key":"lk","loc_args":["z"]},
         "badge":2,"sound":{"critical":true,"name":"s.caf","volume":0.3},"data":{"order":{"id":7}},
         "apns":{"push_type":"liveactivity","priority":5,"expiration":1800000000,"collapse_id":"c","thread_id":"th",
                 "category":"cat","mutable_content":true,"interruption_level":"critical","relevance_score":0.25,
                 "target_content_id":"tc","filter_criteria":"fc",
                 "live_activity":{"event":"update","timestamp":1700000000,"content_state":{"score":3},"stale_date":1700000100}}}
        """)
        #expect(r.app == "a")
        #expect(r.users == ["u1", "u2"])
        #expect(r.tokens == ["t1"])
        #expect(r.attributes == .apns(.sandbox))
        #expect(r.idempotencyKey == "k")
        #expect(r.content.alert == .fields(Alert(title: "T", subtitle: "S", body: "B", titleLocKey: "tk", titleLocArgs: ["x"],
                                                  subtitleLocKey: "sk", subtitleLocArgs: ["y"], locKey: "lk", locArgs: ["z"])))
        #expect(r.content.apns.launchImage == "L")
        #expect(r.content.sound == .critical(name: "s.caf", volume: 0.3))
        #expect(r.content.data["order"] == ["id": 7])
        #expect(r.content.apns.liveActivity?.contentState == ["score": 3])
        #expect(r.content.apns.interruptionLevel == .critical)
        #expect(r.content.pushType == .liveactivity)
        // The stored form reads back to the same content.
        #expect(try NotificationContent.fromAPIJSON(r.content.apiJSON) == r.content)
    }

    @Test func simpleForms() throws {
        let r = try parse(#"{"app":"a","tokens":["t"],"alert":"hello","sound":"default"}"#)
        #expect(r.content.alert == .text("hello"))
        #expect(r.content.sound == .named("default"))
        #expect(try NotificationContent.fromAPIJSON(r.content.apiJSON) == r.content)
        let silent = try parse(#"{"app":"a","users":["u"],"apns":{"content_available":true}}"#)
        #expect(silent.content.pushType == .background)
        // A widget push needs nothing else: its payload is {"aps":{"content-changed":true}}.
        let widget = try parse(#"{"app":"a","users":["u"],"apns":{"push_type":"widgets"}}"#)
        #expect(widget.content.pushType == .widgets && !widget.content.isEmpty)
        #expect(renderProblem(#"{"app":"a","users":["u"],"apns":{"push_type":"alert"}}"#)?.field == "body")
    }

    /// `"widgets": true`: the neutral widget reload, kept in the stored form, rendered by APNs as
    /// the widgets push type with `{"aps":{"content-changed":true}}`, and refused by other renderers.
    @Test func widgetsIsTheNeutralWidgetReload() throws {
        let r = try parse(#"{"app":"a","users":["u"],"widgets":true}"#)
        #expect(r.content.widgets && !r.content.isEmpty)
        #expect(try NotificationContent.fromAPIJSON(r.content.apiJSON) == r.content)
        #expect(r.content.pushType == .widgets)
        let payload = try APNsRoute.render(r.content, context: RenderContext(notificationID: "n", app: "a", topic: "a"))
        #expect(APNsSendOptions(payload).pushType == .widgets)
        #expect(String(decoding: payload.body, as: UTF8.self) == #"{"aps":{"content-changed":true},"herald_id":"n"}"#)
        // Nothing else rides on a widget reload, and no other push type.
        #expect(renderProblem(#"{"app":"a","users":["u"],"widgets":true,"title":"x"}"#)?.field == "widgets")
        #expect(renderProblem(#"{"app":"a","users":["u"],"widgets":true,"apns":{"push_type":"alert"}}"#)?.field == "apns.push_type")
        #expect(renderProblem(#"{"app":"a","users":["u"],"widgets":true,"apns":{"push_type":"widgets"}}"#) == nil)
        #expect(issues(#"{"app":"a","users":["u"],"widgets":"yes"}"#).first?.path == "widgets")
        // The core's default renderer (a route of a plugin with no renderer of its own) refuses it.
        struct Plain: TransportConfiguration { var summary: String { "plain" } }
        #expect(throws: ContentProblem.widgetsNotCarried) {
            try Plain().render(r.content, context: RenderContext(notificationID: "n", app: "a", topic: "a"))
        }
    }

    @Test func errorsNameTheirField() {
        #expect(issues(#"{"app":"a","users":["u"],"alert":{"titel":"x"}}"#).first?.path == "alert.titel")
        #expect(issues(#"{"app":"a","users":["u"],"alert":{"titel":"x"}}"#).first?.message.contains("did you mean \"title\"") == true)
        #expect(issues(#"{"app":"a","users":["u"],"alert":"x","badge":1.5}"#).first?.path == "badge")
        #expect(renderProblem(#"{"app":"a","users":["u"],"alert":"x","apns":{"priority":3}}"#)?.field == "apns.priority")
        #expect(renderProblem(#"{"app":"a","users":["u"],"alert":"x","apns":{"collapse_id":"\#(String(repeating: "c", count: 65))"}}"#)?.field == "apns.collapse_id")
        #expect(issues(#"{"app":"a","users":["u",""],"alert":"x"}"#).first?.path == "users[1]")
        #expect(issues(#"{"app":"a","users":["u"],"alert":{"loc_args":["a",2]}}"#).first?.path == "alert.loc_args[1]")
        #expect(renderProblem(#"{"app":"a","users":["u"],"alert":"x","apns":{"live_activity":{"event":"start"}}}"#)?.field == "apns.live_activity.timestamp")
        #expect(issues(#"{"users":["u"],"alert":"x"}"#).first?.path == "app")
        // A Live Activity's content_state and attributes are the app's own keys, but objects.
        #expect(renderProblem(#"{"app":"a","users":["u"],"apns":{"live_activity":{"event":"end","timestamp":1,"attributes":[null]}}}"#)?.field == "apns.live_activity.attributes")
        #expect(renderProblem(#"{"app":"a","users":["u"],"apns":{"live_activity":{"event":"end","timestamp":1,"content_state":"x"}}}"#)?.field == "apns.live_activity.content_state")
        #expect(issues(#"{"app":"a","alert":"x"}"#).first?.path == "users")
        #expect(issues(#"{"app":"a","users":["u"]}"#).first?.path == "body")
        #expect(issues(#"["app"]"#).first?.path == "")
    }

    /// The apns block is the APNs plugin's: it is checked when a route renders the notification.
    func renderProblem(_ json: String) -> ContentProblem? {
        guard let request = try? parse(json) else { return nil }
        do throws(ContentProblem) {
            _ = try APNsRoute.render(request.content, context: RenderContext(notificationID: "n", app: "a", topic: "a"))
            return nil
        } catch {
            return error
        }
    }
}
