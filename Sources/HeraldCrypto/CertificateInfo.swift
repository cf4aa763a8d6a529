import FoundationEssentials
import Glibc
internal import COpenSSL

/// Facts about a certificate, for `herald check` and the simulators.
///
/// Reads Apple's push-certificate extensions: the topics list (OID 1.2.840.113635.100.6.3.6)
/// and the development (…6.3.1) and production (…6.3.2) markers.
public struct CertificateInfo: Sendable, Equatable {
    /// The subject on one line in certificate order, RFC 2253 escaping, e.g.
    /// `UID=com.example.app, CN=Apple Push Services: com.example.app, OU=DEF123GHIJ, O=…, C=US`.
    public var subject: String
    /// The subject common name (CN), if any.
    public var commonName: String?
    /// The subject UID; Apple puts the bundle id (or the MDM topic) there.
    public var uid: String?
    /// The issuer, formatted like ``subject``.
    public var issuer: String
    /// Start of validity.
    public var notBefore: Date
    /// End of validity.
    public var notAfter: Date
    /// Topics the certificate may push to: from Apple's topics extension; when that is absent
    /// but ``uid`` is set, `[uid]`; otherwise empty.
    public var topics: [String]
    /// Apple's development (sandbox) marker extension is present.
    public var isDevelopment: Bool
    /// Apple's production marker extension is present.
    public var isProduction: Bool

    /// Creates a value directly (for tests and simulators).
    public init(subject: String, commonName: String?, uid: String?, issuer: String, notBefore: Date, notAfter: Date,
                topics: [String], isDevelopment: Bool, isProduction: Bool) {
        self.subject = subject
        self.commonName = commonName
        self.uid = uid
        self.issuer = issuer
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.topics = topics
        self.isDevelopment = isDevelopment
        self.isProduction = isProduction
    }

    /// Reads the first certificate of a PEM file (a DER `.cer` file works too).
    public static func load(pemFile: String) throws(CryptoError) -> CertificateInfo {
        let bytes = try readFile(pemFile, what: "certificate")
        let certificates = try loadCertificates(bytes, source: pemFile)
        return CertificateInfo(certificates[0].raw)
    }

    /// Reads the first certificate in PEM text.
    public static func load(pem: String) throws(CryptoError) -> CertificateInfo {
        let certificates = try loadCertificates(Array(pem.utf8), source: "the PEM certificate text")
        return CertificateInfo(certificates[0].raw)
    }

    /// Reads facts from an OpenSSL `X509`.
    init(_ x509: OpaquePointer) {
        let subjectEntries = CertificateInfo.entries(X509_get_subject_name(x509))
        subject = CertificateInfo.format(subjectEntries)
        commonName = subjectEntries.first { $0.nid == NID_commonName }?.value
        uid = subjectEntries.first { $0.nid == NID_userId }?.value
        issuer = CertificateInfo.format(CertificateInfo.entries(X509_get_issuer_name(x509)))
        notBefore = CertificateInfo.date(X509_get0_notBefore(x509))
        notAfter = CertificateInfo.date(X509_get0_notAfter(x509))
        isDevelopment = CertificateInfo.extensionData(x509, oid: "1.2.840.113635.100.6.3.1") != nil
        isProduction = CertificateInfo.extensionData(x509, oid: "1.2.840.113635.100.6.3.2") != nil
        if let data = CertificateInfo.extensionData(x509, oid: "1.2.840.113635.100.6.3.6") {
            topics = CertificateInfo.topics(fromExtension: data)
        } else {
            topics = uid.map { [$0] } ?? []
        }
        ERR_clear_error()
    }

    private struct Entry {
        var name: String
        var nid: Int32
        var value: String
        var set: Int32
    }

    private static func entries(_ name: OpaquePointer?) -> [Entry] {
        guard let name else { return [] }
        var result: [Entry] = []
        for index in 0..<X509_NAME_entry_count(name) {
            guard let entry = X509_NAME_get_entry(name, index) else { continue }
            let object = X509_NAME_ENTRY_get_object(entry)
            let nid = OBJ_obj2nid(object)
            var label = nid == NID_undef ? nil : OBJ_nid2sn(nid).map { String(cString: $0) }
            if label == nil {
                var buffer = [CChar](repeating: 0, count: 128)
                let length = OBJ_obj2txt(&buffer, Int32(buffer.count), object, 1)
                let used = Int(min(length, Int32(buffer.count - 1)))
                label = length > 0 ? String(decoding: buffer[0..<used].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
            }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry))
            var value = ""
            if length >= 0, let utf8 {
                value = String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
                herald_openssl_free(utf8)
            }
            result.append(Entry(name: label ?? "?", nid: nid, value: value, set: X509_NAME_ENTRY_set(entry)))
        }
        return result
    }

    /// `A=x, B=y` in certificate order; multi-valued RDNs joined with `+`.
    private static func format(_ entries: [Entry]) -> String {
        var text = ""
        var previousSet: Int32?
        for entry in entries {
            if let previousSet { text += previousSet == entry.set ? "+" : ", " }
            text += entry.name + "=" + escape(entry.value)
            previousSet = entry.set
        }
        return text
    }

    /// RFC 2253 escaping of an attribute value.
    private static func escape(_ value: String) -> String {
        var out = ""
        let scalars = Array(value.unicodeScalars)
        for (i, c) in scalars.enumerated() {
            let special = ",+\"\\<>;".unicodeScalars.contains(c)
                || (i == 0 && (c == " " || c == "#")) || (i == scalars.count - 1 && c == " ")
            if special { out += "\\" }
            out.unicodeScalars.append(c)
        }
        return out
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date {
        var seconds: Int64 = 0
        guard let time, herald_asn1_time_to_unix(time, &seconds) == 0 else { return Date(timeIntervalSince1970: 0) }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The DER contents of extension `oid`, or nil when absent.
    private static func extensionData(_ x509: OpaquePointer, oid: String) -> [UInt8]? {
        guard let object = OBJ_txt2obj(oid, 1) else { return nil }
        defer { ASN1_OBJECT_free(object) }
        let index = X509_get_ext_by_OBJ(x509, object, -1)
        guard index >= 0, let ext = X509_get_ext(x509, index), let data = X509_EXTENSION_get_data(ext) else { return nil }
        let length = Int(ASN1_STRING_length(data))
        guard length > 0, let bytes = ASN1_STRING_get0_data(data) else { return [] }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }

    /// Apple's topics extension: `SEQUENCE { UTF8String topic, SEQUENCE { UTF8String kind… }, … }`.
    /// The topic strings are the UTF8Strings directly inside the outer sequence.
    static func topics(fromExtension der: [UInt8]) -> [String] {
        guard let outer = DER.element(der[...]), outer.tag == 0x30 else { return [] }
        var topics: [String] = []
        var rest = outer.contents
        while let element = DER.element(rest) {
            if element.tag == 0x0C { topics.append(String(decoding: element.contents, as: UTF8.self)) }
            rest = element.rest
        }
        return topics
    }
}
