/// Text to print on a terminal (the CLI's output), with what a caller sent made harmless.
///
/// Stored tokens, user ids, attributes and reasons come from strangers: a CR, LF or ESC printed
/// raw can forge a line of output or drive the terminal. Every scalar the logs escape
/// (``LogEscaping/mustEscape(_:)``: C0, DEL, C1, line and paragraph separators, bidirectional
/// controls, U+FEFF, U+FFFD) is written as an escape: `\n`, `\r` and `\t`, else `\u001b`-style.
/// Those are JSON's own escapes, so a JSON line printed through it stays the same JSON.
public enum TerminalText {
    /// `text` with every control character escaped; other characters (a backslash too) as they are.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: LogEscaping.mustEscape) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 16)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if LogEscaping.mustEscape(scalar) {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }
}
