import FoundationEssentials
import Glibc
import HeraldCore
import HeraldCrypto
import HeraldTestKit

/// Two figures of `herald-bench stream` with every stream open: how soon a client that closes
/// stops counting as present, and an acknowledging client's ack round trip.
extension StreamDaemonBench.Run {
    /// One extra stream of the bench's app, held by this process (blocking socket).
    struct HeldStream {
        var fd: Int32
        var user: String
        var buffered: [UInt8] = []
    }

    /// The client token of `user`'s device `device` for the bench's app.
    func clientToken(user: String, device: String) -> String {
        let now = Date()
        return ClientToken.sign(ClientTokenClaims(user: user, app: app, device: device, issuedAt: now, expiresAt: now.addingTimeInterval(3600)),
                                secret: Secret(secret))
    }

    /// Opens a stream for `user` (device `device`) and reads its response head (200 expected).
    func openStream(port: Int, user: String, device: String, ack: Bool) throws -> HeldStream {
        let fd = try Loopback.connect(port: port, receiveTimeout: 30)
        let request = "GET /v1/stream?app=\(app)\(ack ? "&ack=1" : "") HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
            + "Authorization: Bearer \(clientToken(user: user, device: device))\r\n\r\n"
        var stream = HeldStream(fd: fd, user: user)
        try sendAll(fd, Array(request.utf8))
        try readUntil(&stream, [13, 10, 13, 10])
        guard String(decoding: stream.buffered.prefix(12), as: UTF8.self).hasPrefix("HTTP/1.1 200") else {
            close(fd)
            throw StreamDaemonBench.Failure(description: "a stream for \(user) was not opened: \(String(decoding: stream.buffered.prefix(200), as: UTF8.self))")
        }
        stream.buffered = []
        return stream
    }

    /// Reads until `stream.buffered` contains `marker`.
    func readUntil(_ stream: inout HeldStream, _ marker: [UInt8]) throws {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while stream.buffered.firstRange(of: marker) == nil {
            let n = recv(stream.fd, &buffer, buffer.count, 0)
            guard n > 0 else { throw StreamDaemonBench.Failure(description: "a held stream ended (\(n < 0 ? String(cString: strerror(errno)) : "closed"))") }
            stream.buffered += buffer[0..<n]
        }
    }

    func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let w = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard w > 0 else { throw StreamDaemonBench.Failure(description: "send: \(String(cString: strerror(errno)))") }
            sent += w
        }
    }

    /// Opens `count` more streams beside the bench's, then closes them one at a time (FIN and RST
    /// in turn) and times each from the close until the daemon counts one stream less
    /// (`herald_streams_open`, which falls when the device stops counting as present).
    /// - Returns: the seconds for each close.
    func closeToAbsent(port: Int, open: Int, count: Int) throws -> [Double] {
        var held: [HeldStream] = []
        defer { for s in held where s.fd >= 0 { close(s.fd) } }
        for i in 0..<count { held.append(try openStream(port: port, user: "close\(i)", device: device(1_000_000 + i), ack: false)) }
        let start = StreamDaemonBench.monotonic()
        while try metric(port: port, "herald_streams_open") < Double(open + count) {
            if StreamDaemonBench.monotonic() - start > 30 { throw StreamDaemonBench.Failure(description: "the daemon counts \((try? metric(port: port, "herald_streams_open")) ?? -1) streams, not \(open + count), 30 s after the extra ones opened") }
            usleep(10_000)
        }
        var times: [Double] = []
        for i in 0..<count {
            let expected = Double(open + count - i - 1)
            if i % 2 == 1 {
                var l = linger(l_onoff: 1, l_linger: 0)
                setsockopt(held[i].fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
            }
            let closedAt = StreamDaemonBench.monotonic()
            close(held[i].fd)
            held[i].fd = -1
            while try metric(port: port, "herald_streams_open") > expected {
                if StreamDaemonBench.monotonic() - closedAt > 30 { throw StreamDaemonBench.Failure(description: "a closed stream still counted after 30 s") }
            }
            times.append(StreamDaemonBench.monotonic() - closedAt)
            usleep(20_000)
        }
        return times
    }

    /// An acknowledging stream beside the bench's: `count` notifications to its user, each
    /// acknowledged as soon as it arrives. - Returns: per notification the ack's round trip
    /// (POST to 204) and the time from the 202 until the status API says `delivered`.
    /// - Returns: per notification, the ack's round trip, the 202 to `delivered`, and the POST
    ///   (sent) to its event read on the stream.
    func ackRoundTrips(port: Int, count: Int) throws -> (ack: [Double], delivered: [Double], toClient: [Double]) {
        let user = "acker", device = device(2_000_000)
        var stream = try openStream(port: port, user: user, device: device, ack: true)
        defer { close(stream.fd) }
        usleep(200_000)
        var acks: [Double] = [], delivered: [Double] = [], toClient: [Double] = []
        let token = clientToken(user: user, device: device)
        for _ in 0..<count {
            let body = #"{"app":"\#(app)","users":["\#(user)"],"alert":"ack"}"#
            let request = "POST /v1/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
            let posted = StreamDaemonBench.monotonic()
            let (status, text) = try BenchHTTP.exchange(port: port, request)
            let accepted = StreamDaemonBench.monotonic()
            guard status == 202, let idRange = text.firstRange(of: #""id":""#) else { throw StreamDaemonBench.Failure(description: "send answered \(status)") }
            let notification = String(text[idRange.upperBound...].prefix { $0 != "\"" })
            // The event's `id:` line, then its end.
            try readUntil(&stream, Array("\nid: ".utf8))
            if let start = stream.buffered.firstRange(of: Array("\nid: ".utf8)) { stream.buffered.removeSubrange(..<start.lowerBound) }
            try readUntil(&stream, [10, 10])
            toClient.append(StreamDaemonBench.monotonic() - posted)
            let textSoFar = String(decoding: stream.buffered, as: UTF8.self)
            guard let line = textSoFar.split(separator: "\n").last(where: { $0.hasPrefix("id: ") }), let id = Int64(line.dropFirst(4)) else {
                throw StreamDaemonBench.Failure(description: "no event id on the acknowledging stream")
            }
            stream.buffered = []
            let ackBody = #"{"id":\#(id)}"#
            let t = StreamDaemonBench.monotonic()
            let (ackStatus, _) = try BenchHTTP.exchange(port: port, "POST /v1/stream/ack?app=\(app) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n"
                                                         + "Content-Type: application/json\r\nContent-Length: \(ackBody.utf8.count)\r\nConnection: close\r\n\r\n" + ackBody)
            acks.append(StreamDaemonBench.monotonic() - t)
            guard ackStatus == 204 else { throw StreamDaemonBench.Failure(description: "the ack answered \(ackStatus)") }
            while true {
                let (_, status) = try BenchHTTP.exchange(port: port, "GET /v1/notifications/\(notification) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nConnection: close\r\n\r\n")
                if status.contains(#""state":"delivered""#) { break }
                if StreamDaemonBench.monotonic() - accepted > 10 { throw StreamDaemonBench.Failure(description: "an acknowledged notification was not delivered after 10 s") }
                usleep(500)
            }
            delivered.append(StreamDaemonBench.monotonic() - accepted)
        }
        return (acks, delivered, toClient)
    }

    /// "p50 X ms, p99 Y ms, max Z ms" of `values` (seconds).
    static func summary(_ values: [Double]) -> String {
        let sorted = values.sorted()
        func at(_ q: Double) -> String { sorted.isEmpty ? "-" : (sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * q).rounded(.up)))] * 1000).fixed(2) }
        return "p50 \(at(0.5)) ms, p99 \(at(0.99)) ms, max \(at(1)) ms"
    }
}
