internal import CCurl
import FoundationEssentials
import HeraldCore
import Glibc

/// How libcurl's failures map onto the shared rules (``EngineCore``): a stream failing alone,
/// and a lost connection.
extension CurlEngine {
    /// Whether a transfer failed without its connection failing: the server reset its stream
    /// (`CURLE_HTTP2_STREAM`) on a connection that has answered, or its deadline passed while the
    /// connection answered requests meanwhile. Anything else (`CURLE_HTTP2`, send, receive, TLS and
    /// connect errors, a deadline on a silent connection) is the connection's failure.
    func failedAlone(_ code: CURLcode, _ r: PendingRequest) -> Bool {
        switch code {
        case CURLE_HTTP2_STREAM: return warm
        case CURLE_OPERATION_TIMEDOUT: return lastAnswerAt > r.startedAt
        default: return false
        }
    }

    /// The connection died (GOAWAY, reset, close) with requests in flight. libcurl would resend
    /// them all at once on a fresh connection, where APNs refuses all but one stream before the
    /// first answer, which makes libcurl drop that connection too. So take every in-flight
    /// request back, and let them go again one at a time until the new connection answers.
    /// Requests that were answered have completed already; these got no answer. On HTTP/1.1
    /// connections (allowHTTP1) only the requests on the lost ones are taken back: the others
    /// are on connections of their own, and may have been processed.
    ///
    /// Only a request that was on the lost connection spends one of its `connectionRetries`; one
    /// libcurl had not put on it yet (waiting for a stream, or for the next connection) goes again
    /// free (see ``EngineCore/takeBack(_:message:)``).
    func connectionLost(message: String) {
        warm = false
        var taken: [(request: PendingRequest, wasOnIt: Bool)] = []
        for easy in all where easy.request != nil {
            let wasOnIt = easy.localPort != 0 && lostPorts.contains(easy.localPort)
            if http1 && !wasOnIt && easy.localPort != 0 { continue }
            curl_multi_remove_handle(multi, easy.handle)
            taken.append((easy.request!, wasOnIt))
            easy.shape?.inUse -= 1
            easy.request = nil
            easy.shape = nil
            idle.append(easy)
            inFlight -= 1
            settings.metrics.inFlight.add(-1)
        }
        takeBack(taken, message: message)
    }
}
