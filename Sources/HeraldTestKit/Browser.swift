import Foundation
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A headless Chromium for tests (Debian's `chromium` and `chromium-driver`), driven through
/// chromedriver's W3C WebDriver API: JSON over HTTP on 127.0.0.1.
///
/// ``start()`` runs chromedriver on a free loopback port in a process group of its own (with an
/// empty signal mask, so signals reach it even when spawned from a pool thread), with HOME and the
/// profile in a fresh temporary folder, and opens one headless session with flags that keep
/// Chromium off the network (no updates, sync, metrics or crash uploads). ``close()`` ends the
/// session, kills the group (SIGKILL) and removes the folder; `deinit` kills the group too.
/// Prefer ``with(_:)``, which closes on every path and adds the page's console to a failure.
public final class Browser: Sendable {
    /// A WebDriver or setup failure; `description` says what to do next.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    private let driver: SpawnedProcess
    private let port: Int
    private let session: String
    /// The temporary folder holding HOME, the profile and chromedriver's output (removed on close).
    public let folder: String
    private let closed = Locked(false)

    private init(driver: SpawnedProcess, port: Int, session: String, folder: String) {
        self.driver = driver
        self.port = port
        self.session = session
        self.folder = folder
    }

    /// Opens a browser, runs `body`, and closes the browser on every path. When `body` throws,
    /// the error is rethrown as a ``Failure`` that carries the page's console log.
    public static func with<T: Sendable>(_ body: (Browser) async throws -> T) async throws -> T {
        let browser = try await start()
        do {
            let result = try await body(browser)
            await browser.close()
            return result
        } catch {
            let console = await browser.consoleLog()
            await browser.close()
            throw Failure("\(error)\n--- browser console ---\n" + (console.isEmpty ? "(empty)" : console.joined(separator: "\n")))
        }
    }

    /// Starts chromedriver and a headless Chromium session.
    ///
    /// Tried up to three times when chromedriver's own pick for `--port=0` was taken
    /// (`bind() failed: Address already in use`: it picks a port, then binds it).
    public static func start() async throws -> Browser {
        var attempt = 0
        while true {
            attempt += 1
            do { return try await startOnce() } catch let failure as Failure where attempt < 3 && "\(failure)".contains("Address already in use") {
                continue
            }
        }
    }

    private static func startOnce() async throws -> Browser {
        guard let chromium = Self.executable(["/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser"]),
              let chromedriver = Self.executable(["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]) else {
            throw Failure("Chromium or chromedriver is not installed: run scripts/bootstrap.sh --with-chromium "
                          + "(Debian packages chromium and chromium-driver; `make test` does this)")
        }
        var template = Array("/tmp/herald-browser-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure("mkdtemp under /tmp failed: \(String(cString: strerror(errno)))") }
        let folder = String(cString: made)
        let driver: SpawnedProcess
        do {
            driver = try SpawnedProcess(chromedriver, ["--port=0"],
                                        environment: ["HOME": folder, "XDG_CONFIG_HOME": folder + "/config", "XDG_CACHE_HOME": folder + "/cache"],
                                        stdout: .file(folder + "/chromedriver.log"), stderr: .sameAsOutput, newProcessGroup: true)
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
        do {
            let port = try await driverPort(driver, log: folder + "/chromedriver.log")
            let session = try await newSession(port: port, chromium: chromium, folder: folder)
            return Browser(driver: driver, port: port, session: session, folder: folder)
        } catch {
            let log = (try? String(contentsOfFile: folder + "/chromedriver.log", encoding: .utf8)) ?? ""
            Self.stop(driver: driver, folder: folder)
            throw Failure("\(error)\n--- chromedriver output ---\n\(log.suffix(3000))")
        }
    }

    // MARK: Page

    /// Navigates to `url` and waits for the page's load event.
    public func open(_ url: String) async throws {
        _ = try await command("POST", "url", ["url": .string(url)])
    }

    /// Waits until an element matching `css` exists (and, when `text` is given, one whose
    /// rendered text contains it); returns that element's text. Polls every 50 ms.
    /// - Throws: ``Failure`` after `timeout`, naming what the matching elements showed.
    @discardableResult
    public func waitForElement(css: String, containing text: String? = nil, timeout: TimeInterval = 10) async throws -> String {
        let end = Date().addingTimeInterval(timeout)
        var seen: [String] = []
        while true {
            seen = try await texts(css: css)
            if let hit = seen.first(where: { text == nil || $0.contains(text!) }) { return hit }
            if Date() >= end { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        let what = text.map { " containing \"\($0)\"" } ?? ""
        throw Failure("no element \(css)\(what) after \(timeout) s; elements matching \(css): "
                      + (seen.isEmpty ? "none" : seen.map { "\"\($0)\"" }.joined(separator: ", "))
                      + "; page: \((try? await evaluate("return [location.origin + location.pathname, document.readyState, document.body ? document.body.innerText : '']"))?.jsonString ?? "?")")
    }

    /// The rendered text of every element matching `css` (document order; none → empty).
    public func texts(css: String) async throws -> [String] {
        let found = try await command("POST", "elements", ["using": "css selector", "value": .string(css)])
        var result: [String] = []
        for element in found.arrayValue ?? [] {
            guard let id = element.objectValue?.values.first?.stringValue else { continue }
            // An element removed between the two calls is skipped, not an error.
            if let text = try? await command("GET", "element/\(id)/text").stringValue { result.append(text) }
        }
        return result
    }

    /// Runs `script` as a function body in the page (`return` gives the result) and returns its value.
    @discardableResult
    public func evaluate(_ script: String, _ arguments: [JSONValue] = []) async throws -> JSONValue {
        try await command("POST", "execute/sync", ["script": .string(script), "args": .array(arguments)])
    }

    /// Runs `script` as an async function body in the page (a promise it returns is awaited) and
    /// returns the value it resolves to; a rejection is thrown with its message.
    @discardableResult
    public func evaluateAsync(_ script: String, _ arguments: [JSONValue] = []) async throws -> JSONValue {
        let wrapped = """
            const done = arguments[arguments.length - 1];
            Promise.resolve().then(async () => { \(script) }).then((value) => done({ value: value === undefined ? null : value }),
                                                                  (error) => done({ error: String(error && error.message || error) }));
            """
        let answer = try await command("POST", "execute/async", ["script": .string(wrapped), "args": .array(arguments)])
        if let error = answer["error"]?.stringValue { throw Failure("the page's script failed: \(error)") }
        return answer["value"] ?? .null
    }

    /// Sends a Chrome DevTools Protocol command (chromedriver's `goog/cdp/execute`), e.g.
    /// `ServiceWorker.deliverPushMessage`, and returns its result.
    @discardableResult
    public func devTools(_ method: String, _ parameters: JSONValue = [:]) async throws -> JSONValue {
        try await command("POST", "goog/cdp/execute", ["cmd": .string(method), "params": parameters])
    }

    /// Sets a permission for the current page's origin (WebDriver Permissions, e.g. `notifications`).
    public func setPermission(_ name: String, _ state: String) async throws {
        _ = try await command("POST", "permissions", ["descriptor": ["name": .string(name)], "state": .string(state)])
    }

    /// The page's console messages and load errors since the last call (level and text), with
    /// `access_token=` values in URLs shortened.
    public func consoleLog() async -> [String] {
        guard let entries = try? await command("POST", "se/log", ["type": "browser"]).arrayValue else { return [] }
        return entries.map {
            "\($0["level"]?.stringValue ?? "?") \($0["message"]?.stringValue ?? "")".replacing(/access_token=[^&\s"]{8}[^&\s"]*/) {
                "access_token=" + $0.output.dropFirst(13).prefix(8) + "…"
            }
        }
    }

    /// Ends the session, kills chromedriver and Chromium, and removes the temporary folder.
    public func close() async {
        guard closed.withLock({ let was = $0; $0 = true; return !was }) else { return }
        _ = try? await WebDriverHTTP.send(port: port, "DELETE", "/session/\(session)", body: nil, timeout: 10)
        let driver = driver, folder = folder
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {  // waits for processes to die: not on the cooperative pool
                Self.stop(driver: driver, folder: folder)
                done.resume()
            }
        }
    }

    deinit { if !closed.withLock({ $0 }) { Self.stop(driver: driver, folder: folder) } }

    // MARK: WebDriver

    /// `METHOD /session/{id}/path`; returns the answer's `value`, or throws its error.
    private func command(_ method: String, _ path: String, _ body: JSONValue? = nil) async throws -> JSONValue {
        // A POST always carries a JSON object; a GET none (JSONValue's nil literal would be `null`).
        let payload: JSONValue? = method == "POST" ? (body ?? .object([:])) : body
        return try await Self.call(port: port, method, "/session/\(session)/\(path)", payload)
    }

    private static func call(port: Int, _ method: String, _ path: String, _ body: JSONValue?, timeout: Int = 30) async throws -> JSONValue {
        let answer = try await WebDriverHTTP.send(port: port, method, path, body: body, timeout: timeout)
        let value = answer.json?["value"] ?? .null
        guard answer.status == 200 else {
            let error = value["error"]?.stringValue ?? "HTTP \(answer.status)"
            let message = (value["message"]?.stringValue ?? answer.text).split(separator: "\n").first.map(String.init) ?? ""
            throw Failure("WebDriver \(method) \(path): \(error): \(message)")
        }
        return value
    }

    private static func newSession(port: Int, chromium: String, folder: String) async throws -> String {
        let args: [JSONValue] = [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            .string("--user-data-dir=\(folder)/profile"),
            // Loopback only: nothing that phones home.
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--metrics-recording-only", "--disable-default-apps", "--disable-extensions",
            "--disable-crash-reporter", "--disable-breakpad", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
            "--no-pings", "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
            "--dns-prefetch-disable", "--password-store=basic", "--use-mock-keychain",
        ]
        let capabilities: JSONValue = ["capabilities": ["alwaysMatch": [
            "browserName": "chrome",
            "goog:chromeOptions": ["binary": .string(chromium), "args": .array(args)],
            "goog:loggingPrefs": ["browser": "ALL"],
        ]]]
        let value = try await call(port: port, "POST", "/session", capabilities, timeout: 60)
        guard let id = value["sessionId"]?.stringValue else { throw Failure("chromedriver gave no session id: \(value.jsonString)") }
        return id
    }

    /// The port in chromedriver's `ChromeDriver was started successfully on port N.` line.
    private static func driverPort(_ driver: SpawnedProcess, log: String) async throws -> Int {
        let end = Date().addingTimeInterval(20)
        while Date() < end {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let range = text.range(of: "started successfully on port ") {
                if let port = Int(text[range.upperBound...].prefix { $0.isNumber }), port > 0 { return port }
            }
            if let ended = driver.termination { throw Failure("chromedriver exited at start (\(ended))") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        throw Failure("chromedriver did not say its port within 20 s")
    }

    // MARK: Processes

    private static func executable(_ candidates: [String]) -> String? {
        candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Kills chromedriver's process group (Chromium included) and any process that left the group
    /// but names `folder` on its command line (Chromium's crashpad handler calls setsid), reaps
    /// chromedriver, waits for the rest to die, and removes `folder`. Blocks.
    private static func stop(driver: SpawnedProcess, folder: String) {
        kill(-driver.pid, SIGKILL)
        driver.wait()
        // SIGKILL takes effect asynchronously: wait (up to 5 s) until nothing runs from the folder.
        for _ in 0..<250 {
            let left = processes(naming: folder)
            if left.isEmpty { break }
            left.forEach { kill($0, SIGKILL) }
            usleep(20_000)
        }
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// The live (not zombie) processes whose command line contains `text`.
    public static func processes(naming text: String) -> [pid_t] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { entry in
            guard let pid = Int32(entry), let line = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"),
                  String(decoding: line, as: UTF8.self).contains(text) else { return nil }
            return pid
        }
    }
}

/// One HTTP/1.1 exchange with chromedriver on 127.0.0.1, on a thread of its own (blocking
/// sockets stay off Swift's cooperative pool).
enum WebDriverHTTP {
    struct Answer: Sendable {
        var status: Int
        var text: String
        var json: JSONValue? { try? JSONValue.parse(text) }
    }

    static func send(port: Int, _ method: String, _ path: String, body: JSONValue?, timeout: Int) async throws -> Answer {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result { try exchange(port: port, method, path, body: body, timeout: timeout) })
            }
        }
    }

    private static func exchange(port: Int, _ method: String, _ path: String, body: JSONValue?, timeout: Int) throws -> Answer {
        let fd: Int32
        do { fd = try Loopback.connect(port: port, receiveTimeout: timeout) } catch { throw Browser.Failure("chromedriver: \(error)") }
        defer { close(fd) }
        let payload = Array((body?.jsonString ?? "").utf8)
        var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        if body != nil { request += "Content-Type: application/json; charset=utf-8\r\nContent-Length: \(payload.count)\r\n" }
        let bytes = Array((request + "\r\n").utf8) + payload
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw Browser.Failure("sending to chromedriver failed: \(String(cString: strerror(errno)))") }
            sent += n
        }
        // chromedriver may keep the connection open despite `Connection: close`: read the head,
        // then Content-Length bytes (or to the end for a chunked or unsized body).
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var split: Range<Int>?
        var expected: Int?
        while split == nil || expected.map({ data.count < split!.upperBound + $0 }) ?? true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0 { throw Browser.Failure("no answer from chromedriver to \(method) \(path) within \(timeout) s") }
            if n == 0 { break }
            data += buffer[0..<n]
            if split == nil, let found = data.firstRange(of: Array("\r\n\r\n".utf8)) {
                split = found
                let head = String(decoding: data[..<found.lowerBound], as: UTF8.self).lowercased()
                if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) {
                    expected = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
                }
            }
        }
        guard let split else { throw Browser.Failure("chromedriver sent no HTTP answer to \(method) \(path)") }
        let head = String(decoding: data[..<split.lowerBound], as: UTF8.self)
        let statusLine = head.split(separator: "\r\n").first ?? ""
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw Browser.Failure("bad status line from chromedriver: \(statusLine)") }
        var payloadOut = Array(data[split.upperBound...])
        if let expected { payloadOut = Array(payloadOut.prefix(expected)) }
        if head.lowercased().contains("transfer-encoding: chunked") { payloadOut = dechunk(payloadOut) }
        return Answer(status: status, text: String(decoding: payloadOut, as: UTF8.self))
    }

    private static func dechunk(_ raw: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [], i = 0
        while let lineEnd = raw[i...].firstIndex(of: 0x0D), lineEnd + 1 < raw.count {
            let size = Int(String(decoding: raw[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? "", radix: 16) ?? 0
            let start = lineEnd + 2
            guard size > 0, start + size <= raw.count else { break }
            out += raw[start..<start + size]
            i = start + size + 2
            if i >= raw.count { break }
        }
        return out
    }
}
