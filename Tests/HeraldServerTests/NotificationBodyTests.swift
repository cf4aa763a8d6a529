import Foundation
import HeraldCore
@testable import HeraldServer
import Testing

/// The fast reader of notification bodies: the same request as the full reader for the bodies
/// it takes, and `nil` (the full reader decides) for everything else.
struct NotificationBodyTests {
    func full(_ text: String) throws -> NotificationRequest {
        try NotificationRequest.fromAPI(StrictJSON.parse(Array(text.utf8)), blocks: .known(["apns"]))
    }

    func fast(_ text: String) -> NotificationRequest? { NotificationBody.decodeCommon(Array(text.utf8), blocks: ["apns"]) }

    @Test(arguments: [
        #"{"app":"com.example.app","users":["solo"],"alert":{"title":"Hello","body":"Benchmark"},"data":{"k":"v"}}"#,
        #"{"app":"com.example.app","users":["u1"],"alert":"fan-out 12"}"#,
        #" { "app" : "a" , "tokens" : [ "t1" , "t2" ] , "badge" : 3 , "sound" : "default" } "#,
        #"{"app":"a","users":["u","u","v"],"tokens":["t"],"environment":"sandbox","idempotency_key":"order-42","alert":"x"}"#,
        #"{"app":"a","users":["\u00e9l\"o\n"],"alert":"caf\u00e9 \ud83d\ude00","badge":0}"#,
        #"{"app":"a","users":["u"],"alert":{"title":"","subtitle":"s","body":"b","title_loc_key":"tk","title_loc_args":["x",""],"subtitle_loc_key":"sk","subtitle_loc_args":[],"loc_key":"lk","loc_args":["z"]}}"#,
        #"{"app":"a","users":["u"],"title":"T","subtitle":"S","body":"B","image":"https://i","category":"c","thread":"t","collapse_key":"k","priority":"normal","expiration":0,"content_available":true}"#,
        // Override blocks pass through unread; their plugins check them when the notification is planned.
        #"{"app":"a","users":["u"],"alert":"x","apns":{"priority":7}}"#, #"{"app":"a","users":["u"],"alert":"x","apns":{"push_type":"nope"}}"#,
        #"{"app":"a","users":["u"],"alert":"x","apns":{"live_activity":{"event":"end","timestamp":1}}}"#,
        #"{"app":"a","users":["u"],"alert":"x","data":{"aps":{}}}"#, #"{"app":"a","users":["u"],"alert":"x","environment":"prod"}"#,
        #"{"app":"a","users":["u"],"alert":"x","content_available":true}"#,
        #"{"app":"a","users":["u"],"alert":""}"#,
        #"{"app":"a","users":["u"],"data":{"order":{"id":7,"tags":["a",null,true,1.5e3]},"n":null}}"#,
        #"{"app":"a","users":["u"],"badge":2147483647,"alert":"x"}"#,
        #"{"app":"a","users":["u"],"badge":1.0,"alert":"x"}"#,
        #"{"app":"a","users":["u"],"apns":{"content_available":true}}"#,
        #"{"app":"a","users":["u"],"alert":"x","apns":{"push_type":"alert","priority":5,"expiration":0,"collapse_id":"c","thread_id":"t","category":"cat","mutable_content":true,"content_available":false,"interruption_level":"time-sensitive","relevance_score":0.25,"target_content_id":"tc","filter_criteria":"fc"}}"#,
        #"{"app":"a","users":["u"],"apns":{"content_available":true,"priority":10}}"#,
        #"{"app":"a","users":["u"],"apns":{"push_type":"widgets"}}"#,
        #"{"app":"unknown.app","users":["u"],"alert":"x"}"#,
    ])
    func takesCommonBodiesAsTheFullReaderDoes(_ body: String) throws {
        let request = try #require(fast(body))
        #expect(request == (try full(body)))
    }

    @Test(arguments: [
        "", "   ", "[]", "null", #"{"app":"a","users":["u"],"alert":"x"} x"#, #"{"app":"a","users":["u"],"alert":"x""#,
        // What the full reader refuses, with a field path.
        #"{"users":["u"],"alert":"x"}"#, #"{"app":"","users":["u"],"alert":"x"}"#, #"{"app":"a","alert":"x"}"#,
        #"{"app":"a","users":[],"alert":"x"}"#, #"{"app":"a","users":["u"]}"#, #"{"app":"a","users":["u",""],"alert":"x"}"#,
        #"{"app":"a","users":["u",1],"alert":"x"}"#, #"{"app":"a","users":"u","alert":"x"}"#,
        #"{"app":"a","users":["u"],"alert":"x","badge":-1}"#, #"{"app":"a","users":["u"],"alert":"x","badge":1.5}"#,
        #"{"app":"a","users":["u"],"alert":"x","badge":2147483648}"#, #"{"app":"a","users":["u"],"alert":"x","badge":"1"}"#,
        #"{"app":"a","users":["u"],"alert":{"titel":"x"}}"#, #"{"app":"a","users":["u"],"alert":{"loc_args":["a",2]}}"#,
        #"{"app":"a","users":["u"],"alert":{"launch_image":""}}"#, #"{"app":"a","users":["u"],"alert":7}"#,
        #"{"app":"a","users":["u"],"alert":"x","sound":""}"#, #"{"app":"a","users":["u"],"alert":{}}"#,
        #"{"app":"a","users":["u"],"alert":"x","data":[1]}"#, #"{"app":"a","users":["u"],"alert":"x","title":"y"}"#,
        #"{"app":"a","users":["u"],"alert":"x","idempotency_key":"\#(String(repeating: "k", count: 257))"}"#,
        #"{"app":"a","users":["u"],"alert":"x","apns":[]}"#, #"{"app":"a","users":["u"],"alert":"x","apnss":{"priority":5}}"#,
        #"{"app":"a","users":["u"],"alert":"x","collapse_key":"\#(String(repeating: "c", count: 65))"}"#,
        #"{"app":"a","users":["u"],"alert":"x","priority":"urgent"}"#, #"{"app":"a","users":["u"],"alert":"x","expiration":-1}"#,
        #"{"app":"a","users":["u"],"alert":{"title":"T","launch_image":"l"}}"#,
        // Valid, but left to the full reader: duplicates, nulls, escaped keys, the rarer shapes.
        #"{"app":"a","users":["u"],"alert":"x","app":"b"}"#, #"{"app":"a","users":["u"],"alert":{"title":"a","title":"b"}}"#,
        #"{"app":"a","users":["u"],"alert":"x","apns":{"priority":5,"priority":5}}"#, #"{"app":"a","users":["u"],"alert":"x","badge":null}"#,
        #"{"\u0061pp":"a","users":["u"],"alert":"x"}"#, #"{"app":"a","users":["u"],"alert":"x","sound":{"critical":true}}"#,
        #"{"app":"a","users":["u"],"alert":"x","apns":{}}"#, #"{"app":"a","users":["u"],"alert":"x","data":{}}"#,
    ])
    func leavesEverythingElseToTheFullReader(_ body: String) {
        #expect(fast(body) == nil)
    }
}
