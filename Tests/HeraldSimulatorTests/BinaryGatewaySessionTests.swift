import APNsBinaryProtocol
import HeraldTestKit
import Testing
@testable import HeraldSimulator

/// Every validation rule and fault of the gateway, checked on the pure session: exact status,
/// identifier and reason.
@Suite("Binary gateway session")
struct BinaryGatewaySessionTests {
    static let apple = APNsBinaryClientIdentity(subject: "UID=com.example.app, CN=Apple Push Services: com.example.app",
                                                uid: "com.example.app", topics: ["com.example.app"])

    private func run(_ bytes: [UInt8], rules: APNsBinaryRules = APNsBinaryRules(),
                     client: APNsBinaryClientIdentity? = apple) -> (accepted: [APNsBinaryNotification], error: APNsBinaryErrorResponse?, discarded: Int) {
        var session = BinaryGatewaySession(client: client)
        var accepted: [APNsBinaryNotification] = []
        var error: APNsBinaryErrorResponse? = nil
        var discarded = 0
        for event in session.begin(rules: rules) + session.receive(bytes, rules: rules) {
            switch event {
            case .accepted(let n): accepted.append(n)
            case .rejected(let r, _, let d):
                #expect(error == nil, "at most one error response")
                error = r
                discarded = d
            case .dropped:
                Issue.record("unexpected drop")
            }
        }
        return (accepted, error, discarded)
    }

    private func expectError(_ bytes: [UInt8], status: UInt8, identifier: UInt32, reason: String,
                             rules: APNsBinaryRules = APNsBinaryRules(), client: APNsBinaryClientIdentity? = apple,
                             sourceLocation: SourceLocation = #_sourceLocation) {
        let result = run(bytes, rules: rules, client: client)
        #expect(result.accepted.isEmpty, sourceLocation: sourceLocation)
        #expect(result.error?.status.rawValue == status, sourceLocation: sourceLocation)
        #expect(result.error?.identifier == identifier, sourceLocation: sourceLocation)
        #expect(result.error?.reason == reason, sourceLocation: sourceLocation)
        if let e = result.error {
            #expect(e.bytes == [8, status] + BinaryWire.u32(identifier), sourceLocation: sourceLocation)
        }
    }

    let good = BinaryWire.token(0x11)

    @Test func acceptsAllThreeCommands() throws {
        let bytes = BinaryWire.simple(token: good) + BinaryWire.enhanced(identifier: 5, expiry: 99, token: good)
            + BinaryWire.frame(token: good, identifier: 6, expiry: 0, priority: 5)
        let result = run(bytes)
        #expect(result.error == nil)
        #expect(result.accepted.map(\.command) == [0, 1, 2])
        #expect(result.accepted.map(\.identifier) == [nil, 5, 6])
        #expect(result.accepted[1].expiry == 99)
        #expect(result.accepted[2].priority == 5)
        #expect(result.accepted[0].effectivePriority == 10)
        #expect(result.accepted[2].tokenHex == String(repeating: "11", count: 32))
    }

    // MARK: Status 2, 5: token

    @Test func legacyTokenMustBe32Bytes() {
        expectError(BinaryWire.simple(token: BinaryWire.token(1, count: 31)), status: 5, identifier: 0,
                    reason: "token is 31 bytes; command 0 requires 32")
        expectError(BinaryWire.enhanced(identifier: 12, token: BinaryWire.token(1, count: 33)), status: 5, identifier: 12,
                    reason: "token is 33 bytes; command 1 requires 32")
        // A longer frame-token limit does not apply to the legacy commands.
        var rules = APNsBinaryRules()
        rules.maximumFrameTokenSize = 100
        expectError(BinaryWire.enhanced(identifier: 13, token: BinaryWire.token(1, count: 64)), status: 5, identifier: 13,
                    reason: "token is 64 bytes; command 1 requires 32", rules: rules)
    }

    @Test func emptyTokenIsMissing() {
        expectError(BinaryWire.simple(token: []), status: 2, identifier: 0, reason: "the device token is empty (length 0)")
        expectError(BinaryWire.enhanced(identifier: 3, token: []), status: 2, identifier: 3, reason: "the device token is empty (length 0)")
        expectError(BinaryWire.frame(token: [], identifier: 4), status: 2, identifier: 4, reason: "the device token is empty (length 0)")
    }

    @Test func frameWithoutTokenItem() {
        expectError(BinaryWire.frame(token: nil, identifier: 21), status: 2, identifier: 21,
                    reason: "the frame has no item 1 (device token)")
        expectError(BinaryWire.frame([]), status: 2, identifier: 0, reason: "the frame has no item 1 (device token)")
    }

    @Test func frameTokenSize() {
        expectError(BinaryWire.frame(token: BinaryWire.token(1, count: 31), identifier: 22), status: 5, identifier: 22,
                    reason: "token is 31 bytes; expected 32")
        expectError(BinaryWire.frame(token: BinaryWire.token(1, count: 100), identifier: 23), status: 5, identifier: 23,
                    reason: "token is 100 bytes; expected 32")
        var rules = APNsBinaryRules()
        rules.maximumFrameTokenSize = 100
        #expect(run(BinaryWire.frame(token: BinaryWire.token(1, count: 100)), rules: rules).accepted.count == 1)
        expectError(BinaryWire.frame(token: BinaryWire.token(1, count: 101), identifier: 24), status: 5, identifier: 24,
                    reason: "token is 101 bytes; expected 32–100", rules: rules)
    }

    // MARK: Status 4, 7: payload

    @Test func missingOrEmptyPayload() {
        expectError(BinaryWire.frame(token: good, payload: nil, identifier: 31), status: 4, identifier: 31,
                    reason: "the frame has no item 2 (payload)")
        expectError(BinaryWire.frame(token: good, payload: [], identifier: 32), status: 4, identifier: 32,
                    reason: "the payload is empty (length 0)")
        expectError(BinaryWire.enhanced(identifier: 33, token: good, payload: []), status: 4, identifier: 33,
                    reason: "the payload is empty (length 0)")
        expectError(BinaryWire.simple(token: good, payload: []), status: 4, identifier: 0,
                    reason: "the payload is empty (length 0)")
    }

    @Test func framePayloadLimitIs2048() {
        let ok = [UInt8](repeating: UInt8(ascii: "a"), count: 2048)
        #expect(run(BinaryWire.frame(token: good, payload: ok)).accepted.count == 1)
        expectError(BinaryWire.frame(token: good, payload: ok + [0x61], identifier: 41), status: 7, identifier: 41,
                    reason: "payload is 2049 bytes; command 2 allows at most 2048")
    }

    @Test func legacyPayloadLimitIs2048AndConfigurable() {
        let ok = [UInt8](repeating: UInt8(ascii: "a"), count: 2048)
        #expect(run(BinaryWire.enhanced(identifier: 1, token: good, payload: ok)).accepted.count == 1)
        expectError(BinaryWire.enhanced(identifier: 42, token: good, payload: ok + [0x61]), status: 7, identifier: 42,
                    reason: "payload is 2049 bytes; command 1 allows at most 2048")
        expectError(BinaryWire.simple(token: good, payload: ok + [0x61]), status: 7, identifier: 0,
                    reason: "payload is 2049 bytes; command 0 allows at most 2048")
        var rules = APNsBinaryRules()
        rules.legacyPayloadLimit = 256  // before iOS 8
        let small = [UInt8](repeating: UInt8(ascii: "a"), count: 257)
        expectError(BinaryWire.simple(token: good, payload: small), status: 7, identifier: 0,
                    reason: "payload is 257 bytes; command 0 allows at most 256", rules: rules)
    }

    @Test func nonJSONPayloadIsAccepted() {
        let result = run(BinaryWire.frame(token: good, payload: Array("not json".utf8)))
        #expect(result.error == nil)
        #expect(result.accepted.first?.payloadText == "not json")
    }

    // MARK: Status 3, 6: topic from the client certificate

    @Test func certificateWithoutTopic() {
        let anonymous = APNsBinaryClientIdentity(subject: "CN=Some Client", uid: nil, topics: [])
        expectError(BinaryWire.frame(token: good, identifier: 51), status: 3, identifier: 51,
                    reason: "the client certificate (CN=Some Client) names no topic: no UID and no topics extension",
                    client: anonymous)
        var rules = APNsBinaryRules()
        rules.requireTopic = false
        #expect(run(BinaryWire.frame(token: good), rules: rules, client: anonymous).accepted.count == 1)
        // Plaintext connections have no certificate, hence no topic rule.
        #expect(run(BinaryWire.frame(token: good), client: nil).accepted.count == 1)
        // The topics extension alone is enough.
        let topicsOnly = APNsBinaryClientIdentity(subject: "CN=x", uid: nil, topics: ["com.example.other"])
        #expect(run(BinaryWire.frame(token: good), client: topicsOnly).accepted.count == 1)
    }

    @Test func topicTooLong() {
        var rules = APNsBinaryRules()
        rules.maximumTopicSize = 10
        expectError(BinaryWire.enhanced(identifier: 61, token: good), status: 6, identifier: 61,
                    reason: "topic \"com.example.app\" is 15 bytes; at most 10", rules: rules)
    }

    // MARK: Status 8 and injected faults

    @Test func configuredInvalidToken() {
        var rules = APNsBinaryRules()
        rules.invalidTokens = [BinaryWire.hex(BinaryWire.token(0xde))]
        let bytes = BinaryWire.frame(token: good, identifier: 70) + BinaryWire.frame(token: BinaryWire.token(0xde), identifier: 71)
            + BinaryWire.frame(token: good, identifier: 72)
        let result = run(bytes, rules: rules)
        #expect(result.accepted.map(\.identifier) == [70])
        #expect(result.error == APNsBinaryErrorResponse(status: .invalidToken, identifier: 71,
                                                        reason: "token dededede… is configured as invalid"))
        #expect(result.discarded == BinaryWire.frame(token: good, identifier: 72).count)
    }

    @Test func injectedStatusForAToken() {
        for status: UInt8 in [1, 255, 3] {
            var rules = APNsBinaryRules()
            rules.tokenFaults[BinaryWire.hex(good)] = APNsBinaryStatus(rawValue: status)
            expectError(BinaryWire.enhanced(identifier: 80, token: good), status: status, identifier: 80,
                        reason: "fault injected for token 11111111…: status \(APNsBinaryStatus(rawValue: status))", rules: rules)
        }
    }

    // MARK: Protocol errors (128 by default, configurable)

    @Test func protocolErrors() {
        expectError([7, 1, 2, 3], status: 128, identifier: 0, reason: "unknown command 7; the gateway accepts commands 0, 1 and 2")
        let unknownItem = BinaryWire.frame([BinaryWire.item(1, good), BinaryWire.item(2, BinaryWire.alert),
                                            BinaryWire.item(9, [0]), BinaryWire.item(3, BinaryWire.u32(90))])
        let reason = "unknown item id 9; items are 1 token, 2 payload, 3 identifier, 4 expiration, 5 priority"
        expectError(unknownItem, status: 128, identifier: 90, reason: reason)
        var rules = APNsBinaryRules()
        rules.protocolErrorStatus = .unknown
        expectError(unknownItem, status: 255, identifier: 90, reason: reason, rules: rules)
        expectError(BinaryWire.frame(token: good, identifier: 91, priority: 7), status: 128, identifier: 91,
                    reason: "priority 7 is not 10 (immediate) or 5 (power-conserving)")
    }

    @Test func identifierIsEchoedWhereverItsItemSits() {
        // The identifier item comes after the bad token.
        let bytes = BinaryWire.frame([BinaryWire.item(1, BinaryWire.token(1, count: 16)), BinaryWire.item(2, BinaryWire.alert),
                                      BinaryWire.item(3, BinaryWire.u32(0xCAFE_BABE))])
        expectError(bytes, status: 5, identifier: 0xCAFE_BABE, reason: "token is 16 bytes; expected 32")
    }

    // MARK: Status 10: shutdown

    @Test func shutdownAfterN() {
        var rules = APNsBinaryRules()
        rules.shutdownAfter = 2
        let third = BinaryWire.frame(token: good, identifier: 103)
        let bytes = BinaryWire.frame(token: good, identifier: 101) + BinaryWire.frame(token: good, identifier: 102) + third
        let result = run(bytes, rules: rules)
        #expect(result.accepted.map(\.identifier) == [101, 102])
        #expect(result.error?.status == .shutdown)
        #expect(result.error?.identifier == 102)
        #expect(result.error?.reason == "shutdown after 2 notifications on this connection; identifier is the last accepted one")
        #expect(result.discarded == third.count)
    }

    @Test func dropAfterNClosesWithoutAnswer() {
        var rules = APNsBinaryRules()
        rules.dropAfter = 2
        let third = BinaryWire.frame(token: good, identifier: 103)
        var session = BinaryGatewaySession(client: Self.apple)
        let events = session.receive(BinaryWire.frame(token: good, identifier: 101) + BinaryWire.frame(token: good, identifier: 102) + third,
                                     rules: rules)
        #expect(events.count == 3)
        #expect(events.last == .dropped(discardedBytes: third.count))
        #expect(session.isFinished)
        #expect(session.receive(third, rules: rules).isEmpty)
    }

    @Test func shutdownIdentifierIsZeroWhenTheLastGoodOneHadNone() {
        var rules = APNsBinaryRules()
        rules.shutdownAfter = 1
        let result = run(BinaryWire.simple(token: good), rules: rules)
        #expect(result.accepted.count == 1)
        #expect(result.error?.status == .shutdown)
        #expect(result.error?.identifier == 0)
    }

    @Test func shutdownAfterZeroClosesAtOnce() {
        var rules = APNsBinaryRules()
        rules.shutdownAfter = 0
        var session = BinaryGatewaySession(client: nil)
        let events = session.begin(rules: rules)
        guard case .rejected(let r, nil, 0)? = events.first else {
            Issue.record("expected an immediate shutdown, got \(events)")
            return
        }
        #expect(r.status == .shutdown && r.identifier == 0)
        #expect(session.isFinished)
    }

    @Test func shutdownLoweredWhileConnected() {
        var session = BinaryGatewaySession(client: nil)
        var rules = APNsBinaryRules()
        #expect(session.receive(BinaryWire.frame(token: good, identifier: 1), rules: rules).count == 1)
        rules.shutdownAfter = 1
        let events = session.receive(BinaryWire.frame(token: good, identifier: 2), rules: rules)
        #expect(events.count == 1)
        if case .rejected(let r, _, let discarded)? = events.first {
            #expect(r.status == .shutdown && r.identifier == 1)
            #expect(discarded == BinaryWire.frame(token: good, identifier: 2).count)
        } else {
            Issue.record("expected a shutdown, got \(events)")
        }
    }

    // MARK: After an error

    @Test func everythingAfterAnErrorIsDiscarded() {
        var session = BinaryGatewaySession(client: nil)
        let rules = APNsBinaryRules()
        let bad = BinaryWire.frame(token: nil, identifier: 5)
        let events = session.receive(BinaryWire.frame(token: good, identifier: 4) + bad, rules: rules)
        #expect(events.count == 2)
        #expect(session.isFinished)
        #expect(session.receive(BinaryWire.frame(token: good, identifier: 6), rules: rules).isEmpty)
        #expect(session.discardedBytes == BinaryWire.frame(token: good, identifier: 6).count)
        #expect(session.acceptedCount == 1)
    }
}
