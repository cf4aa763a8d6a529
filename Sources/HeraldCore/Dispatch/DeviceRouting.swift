import FoundationEssentials
import Glibc

/// Which route takes a device: the one place that decides, for registrations and for raw
/// addresses in a notification.
///
/// The rule: an explicit `transport`; else the app's first route of the given `vendor` (the
/// plugin's ``TransportConfiguration/vendor``); else the app's first route of the given
/// `platform` that takes the address; else the first route whose plugin accepts the address (and can carry its attributes),
/// routes of a platform before those that carry any device (the `local` streams, `log`).
extension HeraldConfiguration {
    /// The app's routes in the order an unrouted address tries them: routes of a platform
    /// first, then those that carry any device, each group in the app's order.
    public func routeOrder(_ app: AppConfiguration) -> [String] {
        let specific = app.routes.filter { transports[$0]?.configuration.platform != nil }
        return specific + app.routes.filter { transports[$0] != nil && transports[$0]?.configuration.platform == nil }
    }

    /// The route and normalised address of a device being registered.
    /// - Throws: ``AddressProblem`` naming the field (`transport`, `platform`, `token`,
    ///   `subscription…`, `environment`) and what the app's routes expect.
    ///   `vendor` (Android's `"huawei"`, `"xiaomi"`, `"fcm"` …) picks the app's first route whose
    ///   plugin names that ``TransportConfiguration/vendor``.
    public func registrationRoute(app: AppConfiguration, input: DeviceAddressInput, attributes: DeviceAttributes,
                                  transport: String?, platform: Platform?, vendor: String? = nil) throws(AddressProblem) -> (transport: String, address: DeviceAddress)
    {
        let routes = app.routes.joined(separator: ", ")
        if let transport {
            guard app.routes.contains(transport), let spec = transports[transport] else {
                throw AddressProblem(field: "transport", "\"\(transport)\" is not a route of app \(app.id); routes: \(routes)")
            }
            return (transport, try address(on: spec, input, attributes))
        }
        if let vendor {
            let name = try vendorRoute(app: app, vendor: vendor, platform: platform)
            guard let spec = transports[name] else { throw AddressProblem(field: "vendor", "route \(name) is not configured") }
            return (name, try address(on: spec, input, attributes))
        }
        if let platform {
            // The first route of the platform whose plugin takes the address (an app may reach
            // Android phones through FCM and each maker's service at once).
            let name = try platformRoute(app: app, platform: platform)
            guard let spec = transports[name] else { throw AddressProblem(field: "platform", "route \(name) is not configured") }
            do throws(AddressProblem) {
                return (name, try address(on: spec, input, attributes))
            } catch {
                for other in app.routes where other != name && transports[other]?.configuration.platform == platform {
                    if let s = transports[other], let taken = try? address(on: s, input, attributes) { return (other, taken) }
                }
                throw error
            }
        }
        var refusals: [(route: String, problem: AddressProblem)] = []
        for name in routeOrder(app) {
            guard let spec = transports[name] else { continue }
            do {
                return (name, try address(on: spec, input, attributes))
            } catch {
                refusals.append(("\(name) (\(spec.kind))", error))
            }
        }
        // One route: its own words. Several: what each expects.
        if refusals.count == 1 { throw refusals[0].problem }
        throw AddressProblem(field: input.field, "no route of app \(app.id) takes this device: "
                             + refusals.map { "\($0.route): \($0.problem)" }.joined(separator: "; "))
    }

    /// The app's first route of `platform`: where a registration with a `platform` (and a
    /// notification's raw tokens with one, ``NotificationRequest/platform``) go.
    /// - Throws: ``AddressProblem`` naming `platform` when the app has no route of it.
    public func platformRoute(app: AppConfiguration, platform: Platform) throws(AddressProblem) -> String {
        guard let name = app.routes.first(where: { transports[$0]?.configuration.platform == platform }) else {
            let known = app.routes.compactMap { r in transports[r]?.configuration.platform.map { "\(r) (\($0))" } }
            throw AddressProblem(field: "platform", "app \(app.id) has no \(platform) route; routes: "
                                 + (known.isEmpty ? app.routes.joined(separator: ", ") : known.joined(separator: ", ")))
        }
        return name
    }

    /// The app's first route whose plugin names `vendor` (and, when given, of `platform`).
    /// - Throws: ``AddressProblem`` naming `vendor` when the app has none.
    public func vendorRoute(app: AppConfiguration, vendor: String, platform: Platform?) throws(AddressProblem) -> String {
        if let name = app.routes.first(where: { r in
            guard let c = transports[r]?.configuration else { return false }
            return c.vendor == vendor && (platform == nil || c.platform == platform)
        }) {
            return name
        }
        let known = app.routes.compactMap { r in transports[r]?.configuration.vendor.map { "\(r) (\($0))" } }
        throw AddressProblem(field: "vendor", "app \(app.id) has no route for vendor \"\(vendor)\"\(platform.map { " on \($0)" } ?? ""); "
                             + (known.isEmpty ? "no route of it names a vendor" : "vendor routes: " + known.joined(separator: ", ")))
    }

    /// The first route of the app that takes `input` (a raw address in a notification), with
    /// the address it normalised; `nil` when none does.
    public func firstRoute(app: AppConfiguration, input: DeviceAddressInput, attributes: DeviceAttributes) -> (transport: String, address: DeviceAddress)? {
        for name in routeOrder(app) {
            if let spec = transports[name], let address = spec.accepts(input, attributes: attributes) { return (name, address) }
        }
        return nil
    }

    /// Why no route of the app takes `input`, route by route (for a raw address's report).
    public func refusals(app: AppConfiguration, input: DeviceAddressInput, attributes: DeviceAttributes) -> String {
        routeOrder(app).compactMap { name in transports[name] == nil ? nil : refusal(route: name, input: input, attributes: attributes) }
            .joined(separator: "; ")
    }

    /// Why `route` does not take `input`, in its plugin's words; `nil` when it does.
    public func refusal(route name: String, input: DeviceAddressInput, attributes: DeviceAttributes) -> String? {
        guard let spec = transports[name] else { return "\(name): not configured" }
        do {
            let address = try spec.configuration.address(input, attributes: attributes)
            return spec.configuration.canCarry(address.attributes) ? nil : "\(name): cannot carry a device with \(address.attributes)"
        } catch {
            return "\(name): \(error)"
        }
    }

    private func address(on spec: TransportSpec, _ input: DeviceAddressInput, _ attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        let address = try spec.configuration.address(input, attributes: attributes)
        guard spec.configuration.canCarry(address.attributes) else {
            throw AddressProblem(field: input.field, "route \(spec.name) (\(spec.kind)) cannot carry a device with \(address.attributes)")
        }
        return address
    }
}
