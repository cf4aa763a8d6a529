import FoundationEssentials

// libFuzzer target for `POST /v1/notifications` bodies (`make fuzz`, scripts/fuzz.sh): built
// with HeraldCore's sources and NotificationBody.swift into one module, not a SwiftPM target.
//
// For any bytes: the fast reader (`NotificationBody.decodeCommon`) accepts only what the full
// reader (StrictJSON, then `NotificationRequest.fromAPI`) accepts, and reads it the same; what
// the full reader accepts survives the queue's storage form unchanged; its APNs payload is JSON.
// A difference or a crash stops the fuzzer with the input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let fast = NotificationBody.decodeCommon(bytes)
    var full: NotificationRequest? = nil
    if let json = try? JSONValue.parse(Data(bytes)) {
        full = try? NotificationRequest.fromAPI(json)
    }
    if let fast {
        guard let full else { fatalError("fast reader accepted what the full reader refuses: \(String(decoding: bytes, as: UTF8.self))") }
        guard fast == full else { fatalError("readers differ on \(String(decoding: bytes, as: UTF8.self)):\n\(fast)\n\(full)") }
    }
    if let full {
        // Storage round trip.
        let stored = full.content.apiJSON
        guard let back = try? NotificationContent.fromAPIJSON(stored) else {
            fatalError("stored form does not read back: \(String(decoding: stored, as: UTF8.self))")
        }
        guard back == full.content else { fatalError("stored form reads back different: \(String(decoding: stored, as: UTF8.self))") }
        // The APNs payload is valid JSON.
        let payload = APNsPayload.encode(full.content)
        guard (try? JSONValue.parse(Data(payload))) != nil else {
            fatalError("payload is not JSON: \(String(decoding: payload, as: UTF8.self))")
        }
    }
    return 0
}
