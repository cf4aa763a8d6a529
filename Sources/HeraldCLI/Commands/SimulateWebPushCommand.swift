import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldSimulator

/// `herald simulate webpush`: run the Web Push simulator until SIGTERM/SIGINT.
enum SimulateWebPushCommand {
    static let path = "simulate webpush"

    static let spec = CommandSpec(
        path: path,
        summary: "Run Web Push push services on loopback that check, decrypt and record what they receive.",
        usage: "simulate webpush --tls-cert PEM --tls-key PEM [--origins N] [--seed TEXT] [--subscriptions-out FILE --count N] [options]",
        options: [
            .value("host", "ADDR", "address to listen on (default 127.0.0.1)"),
            .value("port", "N", "port of the first origin; the others take the next ports (default 0: free ports)"),
            .value("origins", "N", "push service origins to serve, each on its own port (default 1)"),
            .value("tls-cert", "PEM", "server certificate chain"),
            .value("tls-key", "PEM", "server private key"),
            .value("seed", "TEXT", "what the subscriptions' keys derive from (default: random, printed); the same seed decrypts an earlier run's subscriptions"),
            .value("subscriptions-out", "FILE", "write subscriptions as PushSubscription.toJSON() lines, spread over the origins"),
            .value("count", "N", "how many subscriptions --subscriptions-out writes (default 1)"),
            .value("record", "FILE", "append every accepted message, decrypted, as JSON Lines"),
            .value("application-server-key", "BASE64URL", "the VAPID public key the subscriptions were made with: any other k is 403 VapidPkHashMismatch (default: any key)"),
            .value("mismatched-key", "N", "fault: subscription N was made with another key: 403 VapidPkHashMismatch", repeatable: true),
            .value("gone", "N", "fault: answer subscription N 410 (unsubscribed)", repeatable: true),
            .value("not-found", "N", "fault: answer subscription N 404", repeatable: true),
            .value("too-many-requests", "N", "fault: answer the first N valid requests 429 with Retry-After"),
            .value("server-errors", "N", "fault: then answer the next N valid requests 503 with Retry-After"),
            .value("retry-after", "SECONDS", "Retry-After of those answers (default 1)"),
            .value("latency-ms", "MS", "fault: hold every answer back MS milliseconds"),
        ],
        discussion: """
        Prints "listening on https://HOST:PORT" per origin and "seed SEED" first, then runs until
        SIGTERM or SIGINT and prints what it saw. Subscription N's endpoint is
        https://HOST:PORT/push/N-<check> on origin N mod --origins; its keys derive from the seed
        (HKDF-SHA256), so the simulator keeps no private keys on disk: run it with the same --seed
        to decrypt messages to subscriptions an earlier run wrote out.

        Checks, in order: POST; a path of this seed (404); --not-found, --gone; TTL present (400);
        Urgency very-low|low|normal|high; Topic at most 32 base64url characters; Content-Encoding
        aes128gcm; 4096 bytes at most (413); a VAPID Authorization (401), its ES256 signature, aud =
        this origin, exp in the future and within 24 h, sub mailto:/https: (403 BadJwtToken); the key
        (403 VapidPkHashMismatch); --too-many-requests, --server-errors; the body decrypts with the
        subscription's keys (400). Then 201 with a Location, and the plaintext is recorded.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let configuration = try makeConfiguration(arguments)
        let count = try arguments.int("count", command: path, in: 1...1_000_000) ?? 1
        let simulator: WebPushSimulator
        do throws(WebPushSimulatorError) {
            simulator = try WebPushSimulator(configuration: configuration)
            try simulator.start()
            if let out = arguments.value("subscriptions-out") {
                try simulator.writeSubscriptions(count: count, to: out)
            }
        } catch {
            throw .runtime(error.description)
        }
        TerminationSignal.install()
        for origin in simulator.origins { context.console.out("listening on \(origin)") }
        context.console.out("seed \(configuration.seed)")
        await TerminationSignal.waitAsync()
        simulator.stop()
        context.console.out(simulator.summary)
    }

    static func makeConfiguration(_ arguments: ParsedArguments) throws(CLIError) -> WebPushSimulator.Configuration {
        let files = try arguments.readableFiles(["tls-cert", "tls-key"], command: path)
        var c = WebPushSimulator.Configuration(tls: .init(certificateFile: files[0], keyFile: files[1]),
                                               seed: arguments.value("seed") ?? SimulatedSubscriptions.randomSeed())
        c.host = arguments.value("host") ?? "127.0.0.1"
        let first = try arguments.int("port", command: path, in: 0...65535) ?? 0
        let origins = try arguments.int("origins", command: path, in: 1...64) ?? 1
        c.ports = (0..<origins).map { first == 0 ? 0 : first + $0 }
        c.recordPath = arguments.value("record")
        c.latency = Double(try arguments.int("latency-ms", command: path, in: 0...600_000) ?? 0) / 1000
        var faults = WebPushServiceRules.Faults()
        func indices(_ option: String) throws(CLIError) -> Set<Int> {
            var result = Set<Int>()
            for t in arguments.all(option) {
                guard let n = Int(t), n >= 0 else { throw .usage("--\(option): \"\(t)\" is not a subscription number (0, 1, …)", command: path) }
                result.insert(n)
            }
            return result
        }
        faults.gone = try indices("gone")
        faults.notFound = try indices("not-found")
        faults.mismatchedKey = try indices("mismatched-key")
        if let key = arguments.value("application-server-key") {
            do { faults.applicationServerKey = try P256PublicKey(base64URL: key, source: "--application-server-key") } catch {
                throw .usage(error.message, command: path)
            }
        }
        faults.tooManyRequests = try arguments.int("too-many-requests", command: path, in: 0...Int.max) ?? 0
        faults.serverErrors = try arguments.int("server-errors", command: path, in: 0...Int.max) ?? 0
        faults.retryAfter = try arguments.int("retry-after", command: path, in: 0...86_400) ?? 1
        c.faults = faults
        return c
    }
}
