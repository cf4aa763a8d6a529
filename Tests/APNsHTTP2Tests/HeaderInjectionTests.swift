import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// End to end against the APNs simulator: a collapse id (or any header value) that would add a
/// header, change one or be cut short is refused where it is made, and if one ever got past
/// that, the HTTP/2 client still never sends it. The simulator never records an injected header.
@Suite(.serialized) struct HeaderInjectionTests {
    static let injected = ["a\r\nx-evil: 1", "a\r\napns-priority: 5", "a\nx-evil: 1", "cut\u{0}short"]

    @Test func theRouteRefusesABreakingCollapseIDWhenItRenders() throws {
        let context = RenderContext(notificationID: "n", app: "com.example.app", topic: "com.example.app")
        for value in Self.injected {
            var content = NotificationContent(alert: .text("Hello"))
            content.overrides["apns"] = .object(["collapse_id": .string(value)])
            #expect(throws: ContentProblem.self) { try APNsRoute.render(content, context: context) }
            do throws(ContentProblem) { _ = try APNsRoute.render(content, context: context) } catch { #expect(error.field == "apns.collapse_id") }
            var stored = NotificationContent(alert: .text("Hello"))
            stored.collapseKey = value
            #expect(throws: ContentProblem.self) { try APNsRoute.render(stored, context: context) }
            do throws(ContentProblem) { _ = try APNsRoute.render(stored, context: context) } catch { #expect(error.field == "collapse_key") }
        }
    }

    @Test(arguments: Engine.allCases) func theSimulatorNeverRecordsAnInjectedHeader(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine, ["connectionRetries": 0])
        try await transport.start()
        // Deliveries rendered without the accept-time checks (as a caller driving the transport
        // directly would): the HTTP/2 client's own check is what stands between them and APNs.
        var batch = [TransportFixture.delivery(1)]
        for (i, value) in Self.injected.enumerated() {
            var d = TransportFixture.delivery(i + 2)
            d.payload = RenderedPayload(body: Array(#"{"aps":{"alert":"Hello"}}"#.utf8),
                                        headers: [APNsRoute.Header.pushType: "alert", APNsRoute.Header.priority: "10", APNsRoute.Header.collapseID: value])
            batch.append(d)
        }
        batch.append(TransportFixture.delivery(9))
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.first == .delivered(receipt: batch[0].messageID.uuidString.lowercased()))
        #expect(outcomes.last == .delivered(receipt: batch.last!.messageID.uuidString.lowercased()))
        for outcome in outcomes.dropFirst().dropLast() {
            guard case .rejected(let reason) = outcome else { Issue.record("\(outcome)"); continue }
            #expect(reason.contains("header apns-collapse-id") && !reason.contains("x-evil"), "\(reason)")
        }
        let received = f.apns.simulator.received
        #expect(f.apns.simulator.counters.requests == 2)
        #expect(Set(received.map(\.deviceToken)) == [TransportFixture.token(1), TransportFixture.token(9)])
        #expect(received.allSatisfy { r in r.header("x-evil") == nil && r.collapseID == nil && r.priority == 10 })
    }
}
