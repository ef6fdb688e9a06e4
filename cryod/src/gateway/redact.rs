//! The real key, taken out of what an upstream sends back (an error that
//! quotes the key it was given, say) before the agent reads it: the agent
//! holds only its session's credential, never the key behind it.

/// What stands where the key stood.
pub const REDACTED: &str = "[redacted by cryo]";

/// A response body's bytes with every occurrence of the key replaced, the
/// key found even across the chunks it arrives in: the end of each chunk
/// that could begin the key is held back until the next shows.
pub struct Redact {
    key: Vec<u8>,
    held: Vec<u8>,
}

impl Redact {
    pub fn new(key: &str) -> Redact {
        Redact { key: key.as_bytes().to_vec(), held: Vec::new() }
    }

    /// The part of `chunk` (after what was held) that can go now.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.key.is_empty() {
            return chunk.to_vec();
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let mut out = replace(&buf, &self.key);
        // The longest end of it that begins the key waits for more.
        let keep = (1..self.key.len().min(out.len() + 1)).rev().find(|n| out.ends_with(&self.key[..*n])).unwrap_or(0);
        self.held = out.split_off(out.len() - keep);
        out
    }

    /// What was held back, at the body's end.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

fn replace(text: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(key) {
            out.extend_from_slice(REDACTED.as_bytes());
            i += key.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is found whole, split across chunks at every place, and more
    /// than once; what is not the key passes as it came.
    #[test]
    fn the_key_never_passes_however_it_is_cut() {
        let key = "sk-ant-real-key-123";
        let body = format!("{{\"error\":\"invalid x-api-key {key}\",\"again\":\"{key}\",\"sk-\":1}}");
        for cut in 0..body.len() {
            for second in cut..body.len() {
                let mut r = Redact::new(key);
                let mut out = r.feed(&body.as_bytes()[..cut]);
                out.extend(r.feed(&body.as_bytes()[cut..second]));
                out.extend(r.feed(&body.as_bytes()[second..]));
                out.extend(r.finish());
                let out = String::from_utf8(out).unwrap();
                assert_eq!(out, body.replace(key, REDACTED), "cut at {cut} and {second}");
            }
        }
        let mut r = Redact::new("");
        assert_eq!(r.feed(b"as it came"), b"as it came");
    }
}
