//! HPACK's strings for `authority` (RFC 7541): a header block's
//! Huffman-coded strings decoded and written raw, so loona-hpack's decoder
//! (which builds a hash table of the whole code for each coded string it
//! decodes) reads only raw ones. The code is decoded by its 257 lengths
//! alone (it is canonical); the representations are walked, never
//! interpreted.

/// A header block with each Huffman-coded string (RFC 7541, 5.2) decoded
/// and written raw, every other byte as it was; `None` if it is cut short,
/// a string does not decode, or it grows past `most` bytes. The
/// representations are only walked (6.1 to 6.3): the decoder reads the
/// indexes, the table and its size updates.
pub(crate) fn unhuffman(block: &[u8], most: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len() + block.len() / 2);
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        // The representation's prefix, and the strings after its index:
        // a literal whose name index is 0 has its name as a string too.
        let (prefix, strings) = match first {
            0x80.. => (7, 0),
            0x40.. => (6, if first & 0x3f == 0 { 2 } else { 1 }),
            0x20.. => (5, 0),
            _ => (4, if first & 0x0f == 0 { 2 } else { 1 }),
        };
        let (_, n) = read_integer(&block[at..], prefix)?;
        out.extend_from_slice(&block[at..at + n]);
        at += n;
        for _ in 0..strings {
            let huffman = *block.get(at)? & 0x80 != 0;
            let (len, n) = read_integer(&block[at..], 7)?;
            let string = block.get(at + n..(at + n).checked_add(len)?)?;
            if huffman {
                let decoded = huffman_decode(string)?;
                integer(&mut out, decoded.len(), 7);
                out.extend_from_slice(&decoded);
            } else {
                out.extend_from_slice(&block[at..at + n + len]);
            }
            at += n + len;
        }
        if out.len() > most {
            return None;
        }
    }
    Some(out)
}

/// An HPACK integer with an `n`-bit prefix at the start of `bytes` (RFC
/// 7541, 5.1), and the bytes it takes; `None` if it is cut short or takes
/// more than 5 bytes (about 2^28), as loona-hpack's decoder refuses it.
fn read_integer(bytes: &[u8], n: u8) -> Option<(usize, usize)> {
    let max = (1usize << n) - 1;
    let mut v = usize::from(*bytes.first()?) & max;
    if v < max {
        return Some((v, 1));
    }
    for (i, &b) in bytes.iter().enumerate().skip(1).take(4) {
        v += usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The length of each symbol's code in HPACK's Huffman code (RFC 7541,
/// Appendix B; 256 is the end of string). The code is canonical: the
/// lengths alone give every code.
const HUFFMAN_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
    28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
    10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
    5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
    22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
    22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
    27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
    27, 27, 27, 27, 27, 26, 30,
];

/// HPACK's canonical Huffman code, for decoding: for each length, its first
/// code, how many codes have it, and where its symbols start in `symbols`
/// (every symbol by length, then by value).
struct Canonical {
    first: [u32; 31],
    count: [u32; 31],
    start: [usize; 31],
    symbols: [u16; 257],
}

fn canonical() -> &'static Canonical {
    static CODE: std::sync::OnceLock<Canonical> = std::sync::OnceLock::new();
    CODE.get_or_init(|| {
        let mut c = Canonical { first: [0; 31], count: [0; 31], start: [0; 31], symbols: [0; 257] };
        for &len in &HUFFMAN_LENGTHS {
            c.count[usize::from(len)] += 1;
        }
        let (mut code, mut start) = (0u32, 0usize);
        for len in 1..31 {
            c.first[len] = code;
            c.start[len] = start;
            code = (code + c.count[len]) << 1;
            start += c.count[len] as usize;
        }
        let mut next = c.start;
        for (symbol, &len) in HUFFMAN_LENGTHS.iter().enumerate() {
            c.symbols[next[usize::from(len)]] = symbol as u16;
            next[usize::from(len)] += 1;
        }
        c
    })
}

/// A Huffman-coded string decoded (RFC 7541, 5.2): `None` if it holds the
/// end of string, or its padding is longer than 7 bits or not the end of
/// string's first bits.
fn huffman_decode(coded: &[u8]) -> Option<Vec<u8>> {
    let c = canonical();
    let mut out = Vec::with_capacity(coded.len() * 8 / 5 + 1);
    let (mut code, mut len) = (0u32, 0usize);
    for byte in coded {
        for bit in (0..8).rev() {
            code = code << 1 | u32::from(byte >> bit & 1);
            len += 1;
            let offset = code.wrapping_sub(c.first[len]);
            if offset < c.count[len] {
                match c.symbols[c.start[len] + offset as usize] {
                    256 => return None,
                    symbol => out.push(symbol as u8),
                }
                (code, len) = (0, 0);
            } else if len == 30 {
                return None;
            }
        }
    }
    (len <= 7 && code == (1 << len) - 1).then_some(out)
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541, 5.1); the prefix's
/// other bits are zero.
pub(crate) fn integer(out: &mut Vec<u8>, mut v: usize, n: u8) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(v as u8);
        return;
    }
    out.push(max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// Every symbol's code as the lengths make it, written bit by bit (for
/// tests: what a client's Huffman coder sends).
#[cfg(test)]
pub(crate) fn huffman_encode(text: &[u8]) -> Vec<u8> {
    let c = canonical();
    let mut code_of = [(0u32, 0u8); 257];
    for len in 1..31 {
        for k in 0..c.count[len] {
            code_of[usize::from(c.symbols[c.start[len] + k as usize])] = (c.first[len] + k, len as u8);
        }
    }
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u64, 0u32);
    for &b in text {
        let (code, len) = code_of[usize::from(b)];
        acc = acc << len | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            out.push((acc >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    if bits > 0 {
        // Padded with the end of string's first bits (all ones).
        out.push((acc << (8 - bits) | ((1 << (8 - bits)) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most `authority` lets a block grow to.
    const MAX_MENDED: usize = 256 * 1024;

    fn unhuffman_(block: &[u8]) -> Option<Vec<u8>> {
        unhuffman(block, MAX_MENDED)
    }

    /// The code made from the lengths is RFC 7541's: the crate's decoder
    /// (built from the RFC's table of codes) reads what it codes, and ours
    /// reads it back, for every byte and many strings.
    #[test]
    fn the_huffman_code_is_rfc_7541s() {
        let mut texts: Vec<Vec<u8>> = vec![(0..=255).collect(), b"www.example.com".to_vec(), Vec::new()];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for n in 0..500 {
            let text = (0..n % 40)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            texts.push(text);
        }
        for text in texts {
            let coded = huffman_encode(&text);
            let theirs = loona_hpack::huffman::HuffmanDecoder::new().decode(&coded).unwrap();
            assert_eq!(theirs, text);
            assert_eq!(huffman_decode(&coded).unwrap(), text);
        }
        // RFC 7541, C.4.1's authority.
        let coded = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(huffman_decode(&coded).unwrap(), b"www.example.com");
    }

    /// What the crate refuses, this refuses: padding of 8 bits or more,
    /// padding that is not all ones, the end of string inside.
    #[test]
    fn a_bad_huffman_string_is_refused() {
        let a = huffman_encode(b"a"); // 00011, padded 111
        assert_eq!(a, [0b0001_1111]);
        for bad in [vec![0b0001_1111, 0xff], vec![0b0001_1110], vec![0xff, 0xff, 0xff, 0xff]] {
            assert!(loona_hpack::huffman::HuffmanDecoder::new().decode(&bad).is_err(), "{bad:?}");
            assert_eq!(huffman_decode(&bad), None, "{bad:?}");
        }
    }

    /// RFC 7541's requests with Huffman coding (C.4), and its responses
    /// (C.6: a table size, an eviction): with their strings made raw, the
    /// crate's decoder reads the same headers as from the coded blocks.
    #[test]
    fn blocks_read_the_same_with_their_strings_raw() {
        let hex = |s: &str| -> Vec<u8> {
            let s: String = s.split_whitespace().collect();
            (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
        };
        let requests = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        let responses = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718              63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ff c1 c0 bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7              b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        for blocks in [&requests[..], &responses[..]] {
            let (mut coded, mut raw) = (loona_hpack::Decoder::new(), loona_hpack::Decoder::new());
            coded.set_max_allowed_table_size(256);
            raw.set_max_allowed_table_size(256);
            for block in blocks {
                let block = hex(block);
                let made_raw = unhuffman_(&block).unwrap();
                assert_ne!(made_raw, block, "every block here has a coded string");
                assert_eq!(raw.decode(&made_raw).unwrap(), coded.decode(&block).unwrap());
            }
        }
        // Cut short anywhere, a block is refused rather than misread.
        let block = hex(requests[2]);
        for cut in 1..block.len() {
            if let Some(made) = unhuffman_(&block[..cut]) {
                assert!(made.len() <= MAX_MENDED);
            }
        }
        assert_eq!(unhuffman_(&hex("4088 25a8 49e9 5ba9 7d7f")), None);
    }

    /// An integer of up to 5 bytes is read; a longer one (a length padded
    /// with empty continuation bytes) is refused, as the crate refuses it.
    #[test]
    fn integers_are_read_as_the_crate_reads_them() {
        assert_eq!(read_integer(&[31, 154, 10], 5), Some((1337, 3)));
        assert_eq!(read_integer(&[0x7f, 0x80, 0x80, 0x80, 0x00], 7), Some((127, 5)));
        assert_eq!(read_integer(&[0x7f, 0x80, 0x80, 0x80, 0x80, 0x00], 7), None);
        assert_eq!(read_integer(&[0x7f, 0x80], 7), None);
        // `:path` (name 4), its value a coded string whose length takes 6 bytes.
        let padded = [0x04, 0xff, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert!(loona_hpack::Decoder::new().decode(&padded).is_err());
        assert_eq!(unhuffman_(&padded), None);
    }
}
