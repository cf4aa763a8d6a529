#if canImport(UserNotifications)
import Foundation
import UserNotifications

/// Raises a local notification for each notification that arrives down the stream (Apple
/// platforms; the app asks for authorization first, and its `UNUserNotificationCenterDelegate`
/// decides how it shows in the foreground, see docs/ios-app.md).
///
/// `@unchecked Sendable`: its one property, a `Bundle`, is thread-safe (older SDKs do not mark it
/// `Sendable`).
public struct LocalNotificationPresenter: @unchecked Sendable {
    /// The bundle whose `Localizable.strings` resolves `loc_key`s.
    public var bundle: Bundle

    /// Creates a presenter.
    public init(bundle: Bundle = .main) { self.bundle = bundle }

    /// The content for `notification`: title, subtitle and body (localized keys resolved), badge,
    /// sound, and `userInfo` with the `data` and the Herald id under ``HeraldClient/notificationIDKey``.
    public func content(for notification: HeraldNotification) -> UNMutableNotificationContent {
        let content = UNMutableNotificationContent()
        if let alert = notification.alert {
            content.title = alert.displayTitle(bundle: bundle) ?? ""
            content.subtitle = alert.displaySubtitle(bundle: bundle) ?? ""
            content.body = alert.displayBody(bundle: bundle) ?? ""
        }
        if let badge = notification.badge { content.badge = NSNumber(value: badge) }
        #if !os(tvOS)
        switch notification.sound {
        case .named("default")?: content.sound = .default
        case .named(let name)?: content.sound = UNNotificationSound(named: UNNotificationSoundName(name))
        case .critical(let name, let volume)?:
            let level = Float(min(max(volume ?? 1, 0), 1))
            if let name, name != "default" {
                content.sound = .criticalSoundNamed(UNNotificationSoundName(name), withAudioVolume: level)
            } else {
                content.sound = .defaultCriticalSound(withAudioVolume: level)
            }
        case nil: break
        }
        #endif
        content.userInfo = notification.userInfo as [AnyHashable: Any]
        return content
    }

    /// Shows `notification` now (identifier: its Herald id, so a second request replaces it
    /// rather than showing it twice).
    public func present(_ notification: HeraldNotification) async throws {
        let request = UNNotificationRequest(identifier: notification.id, content: content(for: notification), trigger: nil)
        try await UNUserNotificationCenter.current().add(request)
    }
}
#endif
