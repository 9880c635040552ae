//! Opaque pagination cursors: a position in a list, tagged with the list it belongs to
//! and a format version, in URL-safe base64 so clients treat it as a token.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// The cursor of `position` in the list named `list` (e.g. `agents`).
pub fn encode(list: &str, position: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{list}:v1:{position}"))
}

/// The position a cursor of `list` names; None for anything else (another list's
/// cursor, another version, or not a cursor at all). Padding is tolerated.
pub fn decode(list: &str, cursor: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim_end_matches('=')).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let position = text.strip_prefix(list)?.strip_prefix(":v1:")?;
    Some(position.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_within_their_list_only() {
        let cursor = encode("agents", "0190-abc");
        assert_eq!(decode("agents", &cursor).as_deref(), Some("0190-abc"));
        assert_eq!(decode("agents", &format!("{cursor}==")).as_deref(), Some("0190-abc"));
        assert_eq!(decode("runs", &cursor), None);
        assert_eq!(decode("agents", "not a cursor"), None);
        assert_eq!(decode("agents", &URL_SAFE_NO_PAD.encode("agents:v2:x")), None);
    }
}
