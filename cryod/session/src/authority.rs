//! Lets stock gRPC clients in over a Unix socket. Newer gRPC libraries
//! (grpcio 1.57+, grpc-go, grpc-java) send the socket's path,
//! percent-encoded, as the HTTP/2 `:authority` (`%2Frun%2Fuser%2F…`); h2,
//! under tonic, takes a `%` outside the userinfo for a malformed request and
//! resets every stream with `PROTOCOL_ERROR` (hyperium/h2#487). Nothing in
//! tonic sees the request first, so the client's bytes are mended on their
//! way in: each header block is decoded (HPACK, with the client's dynamic
//! table; its Huffman-coded strings by our own canonical decoder, then the
//! rest by loona-hpack's), an `:authority` with a `%` becomes `localhost`, and the block is
//! encoded again as literals that touch no table, so h2's decoder table
//! stays empty and in step. Every other frame passes as it came.
//!
//! Anything unexpected (a bad frame, a block that does not decode, one over
//! [`MAX_BLOCK`]) turns the mending off for the rest of the connection: the
//! bytes then pass untouched, and h2 answers them as it would have.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::hpack::{integer, unhuffman};

/// HTTP/2's connection preface, which the client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload h2 accepts unless told otherwise (and so the
/// largest this sends).
const MAX_FRAME: usize = 16_384;
/// The largest header block mended; a larger one turns the mending off.
pub(crate) const MAX_BLOCK: usize = 64 * 1024;
/// The most a mended block may grow to once decoded.
const MAX_MENDED: usize = 256 * 1024;
/// The dynamic table the client's encoder may use: what h2 allows it
/// (SETTINGS_HEADER_TABLE_SIZE's default, which cryod never raises). A
/// client that asks for more is answered by h2, unmended.
const TABLE: usize = 4096;
/// What replaces a percent-encoded authority.
const LOCALHOST: &[u8] = b"localhost";

/// A connection whose incoming header blocks are mended (see the module).
pub struct Mended<S> {
    inner: S,
    /// Bytes read and not yet parsed.
    raw: Vec<u8>,
    /// Bytes ready for the reader, and how many of them it took.
    out: Vec<u8>,
    taken: usize,
    /// Bytes of the preface still to pass.
    preface: usize,
    /// Bytes of the frame passing now (not a header block) still to pass.
    passing: usize,
    /// A header block being gathered: the first frame's stream, flags and
    /// priority fields, and the fragments so far.
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    /// Mending is off: bytes pass as they come.
    off: bool,
    eof: bool,
}

struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

impl<S> Mended<S> {
    pub fn new(inner: S) -> Mended<S> {
        Mended {
            inner,
            raw: Vec::new(),
            out: Vec::new(),
            taken: 0,
            preface: PREFACE.len(),
            passing: 0,
            block: None,
            decoder: {
                let mut d = loona_hpack::Decoder::new();
                d.set_max_allowed_table_size(TABLE);
                d
            },
            off: false,
            eof: false,
        }
    }

    /// Moves what can be parsed from `raw` to `out`. `raw` is read with a
    /// cursor and compacted once at the end (a drain per frame would copy
    /// what is left each time: quadratic in a read of small frames).
    fn parse(&mut self) {
        let mut at = 0;
        self.step(&mut at);
        self.raw.drain(..at);
        if self.off {
            self.out.append(&mut self.raw);
        }
    }

    fn step(&mut self, at: &mut usize) {
        if self.preface > 0 {
            let n = self.preface.min(self.raw.len());
            if self.raw[..n] != PREFACE[PREFACE.len() - self.preface..][..n] {
                return self.give_up(at);
            }
            self.out.extend_from_slice(&self.raw[..n]);
            *at = n;
            self.preface -= n;
        }
        while !self.off && self.preface == 0 {
            let rest = &self.raw[*at..];
            if self.passing > 0 {
                let n = self.passing.min(rest.len());
                if n == 0 {
                    return;
                }
                self.out.extend_from_slice(&rest[..n]);
                *at += n;
                self.passing -= n;
                continue;
            }
            if rest.len() < 9 {
                return;
            }
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let (kind, flags) = (rest[3], rest[4]);
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
            let gathering = self.block.is_some();
            if !matches!(kind, HEADERS | CONTINUATION) && !gathering {
                // Passes as it is, as it comes.
                self.out.extend_from_slice(&rest[..9]);
                *at += 9;
                self.passing = len;
                continue;
            }
            if len > MAX_FRAME || (kind == CONTINUATION) != gathering {
                // Oversized, or out of order: h2 answers it.
                return self.give_up(at);
            }
            if rest.len() < 9 + len {
                return;
            }
            let payload = &rest[9..9 + len];
            if kind == HEADERS {
                let Some((priority, fragment)) = headers_payload(flags, payload) else {
                    return self.give_up(at);
                };
                self.block = Some(Block { stream, flags, priority, fragment: fragment.to_vec() });
            } else {
                let b = self.block.as_mut().expect("gathering");
                if stream != b.stream || b.fragment.len() + payload.len() > MAX_BLOCK {
                    return self.give_up(at);
                }
                b.fragment.extend_from_slice(payload);
            }
            *at += 9 + len;
            if flags & END_HEADERS != 0 {
                let b = self.block.take().expect("gathering");
                match self.mend(&b.fragment) {
                    Some(block) => emit(&mut self.out, &b, &block, true),
                    None => {
                        // Whole, but not decodable (or too big once
                        // decoded): h2 says why.
                        emit(&mut self.out, &b, &b.fragment, true);
                        return self.give_up(at);
                    }
                }
            }
        }
    }

    /// The block decoded and encoded again, its authority mended; `None` if
    /// it does not decode or decodes to more than [`MAX_MENDED`] (a client
    /// may name a table entry thousands of times).
    fn mend(&mut self, fragment: &[u8]) -> Option<Vec<u8>> {
        // The decoder builds a hash table of the whole Huffman code for each
        // string it decodes (loona-hpack 0.4): its strings come to it raw.
        let fragment = &unhuffman(fragment, MAX_MENDED)?;
        let mut block = Vec::with_capacity(fragment.len() + 16);
        let mut bad = false;
        self.decoder
            .decode_with_cb(fragment, |name, value| {
                if bad || block.len() + name.len() + value.len() > MAX_MENDED {
                    bad = true;
                    return;
                }
                let value: &[u8] = if &*name == b":authority" && !plain(&value) { LOCALHOST } else { &value };
                literal(&mut block, &name, value);
            })
            .ok()?;
        (!bad).then_some(block)
    }

    /// Mending is off from here: a block being gathered passes as it came
    /// (without its end), then every byte from `at` on.
    fn give_up(&mut self, at: &mut usize) {
        if !self.off {
            tracing::debug!("a connection's HTTP/2 framing was not as expected: its bytes pass unmended");
        }
        self.off = true;
        if let Some(b) = self.block.take() {
            emit(&mut self.out, &b, &b.fragment, false);
        }
        self.out.extend_from_slice(&self.raw[*at..]);
        *at = self.raw.len();
    }
}

/// A HEADERS frame's priority fields and header block fragment.
fn headers_payload(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let (pad, mut rest) = if flags & PADDED != 0 { (*payload.first()? as usize, &payload[1..]) } else { (0, payload) };
    rest = rest.get(..rest.len().checked_sub(pad)?)?;
    let priority = if flags & PRIORITY != 0 {
        let p: [u8; 5] = rest.get(..5)?.try_into().ok()?;
        rest = &rest[5..];
        Some(p)
    } else {
        None
    };
    Some((priority, rest))
}

/// One header as a literal without indexing, with a new name and no
/// Huffman coding (RFC 7541, 6.2.2).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        integer(out, s.len(), 7);
        out.extend_from_slice(s);
    }
}

/// A header block as a HEADERS frame and as many CONTINUATION frames as it
/// needs; the last ends the block if `end` (else a frame that stopped the
/// mending follows).
fn emit(out: &mut Vec<u8>, b: &Block, block: &[u8], end: bool) {
    let end = if end { END_HEADERS } else { 0 };
    let mut first = Vec::with_capacity(5 + block.len().min(MAX_FRAME));
    let mut flags = b.flags & (END_STREAM | PRIORITY);
    if let Some(p) = b.priority {
        first.extend_from_slice(&p);
    }
    let room = MAX_FRAME - first.len();
    let (head, mut rest) = block.split_at(block.len().min(room));
    first.extend_from_slice(head);
    if rest.is_empty() {
        flags |= end;
    }
    frame(out, HEADERS, flags, b.stream, &first);
    while !rest.is_empty() {
        let (chunk, more) = rest.split_at(rest.len().min(MAX_FRAME));
        let flags = if more.is_empty() { end } else { 0 };
        frame(out, CONTINUATION, flags, b.stream, chunk);
        rest = more;
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

impl<S: AsyncRead + Unpin> AsyncRead for Mended<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.taken < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.taken);
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let got = rb.filled();
            if got.is_empty() {
                // The end: whatever was left unparsed goes as it is.
                this.eof = true;
                if let Some(b) = this.block.take() {
                    emit(&mut this.out, &b, &b.fragment, false);
                }
                this.out.append(&mut this.raw);
                continue;
            }
            if this.off {
                this.out.extend_from_slice(got);
                continue;
            }
            this.raw.extend_from_slice(got);
            this.parse();
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Mended<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// An authority h2 takes as it is: one that parses as an authority and has
/// no `%` (a percent-encoded path, grpcio's and grpc-go's) and no `/` (the
/// socket's raw path, grpcurl's), which h2 resets the stream for.
fn plain(value: &[u8]) -> bool {
    !value.contains(&b'%') && tonic::codegen::http::uri::Authority::try_from(value).is_ok()
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// A client's bytes: the preface, SETTINGS, and for each request a
    /// HEADERS frame (its block coded by `enc`, which indexes as a client's
    /// encoder does) and a DATA frame.
    fn client(enc: &mut loona_hpack::Encoder<'_>, requests: &[&[(&[u8], &[u8])]]) -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        frame(&mut out, 0x4, 0, 0, &[]);
        for (i, headers) in requests.iter().enumerate() {
            let stream = 1 + 2 * i as u32;
            let block = enc.encode(headers.iter().copied());
            // Split over a CONTINUATION, and padded, to take every path.
            let (a, b) = block.split_at(block.len() / 2);
            let mut first = vec![3u8];
            first.extend_from_slice(a);
            first.extend_from_slice(&[0, 0, 0]);
            frame(&mut out, HEADERS, PADDED, stream, &first);
            frame(&mut out, CONTINUATION, END_HEADERS, stream, b);
            frame(&mut out, 0x0, END_STREAM, stream, b"\0\0\0\0\x05hello");
        }
        out
    }

    /// Reads `bytes` through `Mended`, `chunk` bytes at a time.
    async fn mended(bytes: Vec<u8>, chunk: usize) -> Vec<u8> {
        let (mut tx, rx) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in bytes.chunks(chunk) {
                tx.write_all(c).await.unwrap();
            }
        });
        let mut out = Vec::new();
        Mended::new(rx).read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        out
    }

    /// The frames of `bytes` after the preface: (kind, flags, stream, payload).
    fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut rest = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
            out.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
            rest = &rest[9 + len..];
        }
        out
    }

    #[tokio::test]
    async fn a_percent_encoded_authority_becomes_localhost_and_the_rest_is_kept() {
        authority_mended(b"%2Frun%2Fuser%2F1000%2Fcryo%2Fcryod.sock").await;
    }

    /// grpcurl's: the socket's path as it is.
    #[tokio::test]
    async fn a_raw_path_authority_becomes_localhost_and_the_rest_is_kept() {
        authority_mended(b"/run/user/1000/cryo/cryod.sock").await;
    }

    /// A named authority passes as it came.
    #[tokio::test]
    async fn a_plain_authority_is_kept() {
        assert!(super::plain(b"localhost") && super::plain(b"cryod:80"));
        assert!(!super::plain(b"/run/x.sock") && !super::plain(b"%2Frun") && !super::plain(b""));
    }

    async fn authority_mended(encoded: &'static [u8]) {
        let request = |path: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
            vec![
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path),
                (b":authority", encoded),
                (b"content-type", b"application/grpc"),
                (b"x-cryo-operator-key", b"k3y"),
            ]
        };
        let (one, two) = (request(b"/cryo.v1.Control/Hello"), request(b"/cryo.v1.Control/ChamberList"));
        let mut enc = loona_hpack::Encoder::new();
        // The second request's block refers to the first's dynamic entries.
        let bytes = client(&mut enc, &[&one, &two]);
        for chunk in [1, 7, 8192] {
            let out = mended(bytes.clone(), chunk).await;
            assert_eq!(&out[..PREFACE.len()], PREFACE);
            let fs = frames(&out);
            let kinds: Vec<u8> = fs.iter().map(|f| f.0).collect();
            assert_eq!(kinds, [0x4, HEADERS, 0x0, HEADERS, 0x0], "chunks of {chunk}");
            let mut dec = loona_hpack::Decoder::new();
            for (i, want) in [&one, &two].into_iter().enumerate() {
                let (_, flags, stream, block) = &fs[1 + 2 * i];
                assert_eq!((*flags & END_HEADERS, *stream), (END_HEADERS, 1 + 2 * i as u32));
                let got = dec.decode(block).unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = want
                    .iter()
                    .map(|(n, v)| (n.to_vec(), if *v == encoded { LOCALHOST.to_vec() } else { v.to_vec() }))
                    .collect();
                assert_eq!(got, want);
                assert_eq!(fs[2 + 2 * i], (0x0, END_STREAM, 1 + 2 * i as u32, b"\0\0\0\0\x05hello".to_vec()));
            }
        }
    }

    #[tokio::test]
    async fn what_is_not_http2_as_expected_passes_untouched() {
        for bytes in [
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            // A CONTINUATION with no HEADERS before it.
            [PREFACE, &[0, 0, 1, CONTINUATION, END_HEADERS, 0, 0, 0, 1, 0x82]].concat(),
            // A header block that does not decode (index 70 is in no table).
            [PREFACE, &[0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 1, 0x80 | 70], b"more"].concat(),
        ] {
            assert_eq!(mended(bytes.clone(), 3).await, bytes);
        }
        // A HEADERS frame where a CONTINUATION was due: both pass.
        let cut =
            [PREFACE, &[0, 0, 1, HEADERS, 0, 0, 0, 0, 1, 0x82], &[0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 3, 0x82]]
                .concat();
        assert_eq!(mended(cut.clone(), 4).await, cut);
        // Over two frames, it passes as one, every byte of it kept.
        let two = [
            PREFACE,
            &[0, 0, 1, HEADERS, 0, 0, 0, 0, 1, 0x82],
            &[0, 0, 1, CONTINUATION, END_HEADERS, 0, 0, 0, 1, 0x80 | 70],
        ]
        .concat();
        let one = [PREFACE, &[0, 0, 2, HEADERS, END_HEADERS, 0, 0, 0, 1, 0x82, 0x80 | 70]].concat();
        assert_eq!(mended(two, 5).await, one);
    }

    #[test]
    fn integers_are_coded_as_rfc_7541_says() {
        // C.1.1, C.1.2 and C.1.3, with a 5-bit prefix.
        for (v, n, want) in [(10, 5, vec![10u8]), (1337, 5, vec![31, 154, 10]), (42, 8, vec![42])] {
            let mut out = Vec::new();
            integer(&mut out, v, n);
            assert_eq!(out, want, "{v}");
        }
    }

    /// A client may not grow its table past what h2 allows, nor make one
    /// small block decode to a huge one by naming an entry over and over:
    /// either passes unmended, for h2 to refuse, and nothing is held.
    #[tokio::test]
    async fn a_client_cannot_make_the_mending_hold_much() {
        // A table size update to about 256 MiB, then an entry added.
        let grow =
            [PREFACE, &[0, 0, 9, HEADERS, END_HEADERS, 0, 0, 0, 1, 0x3f, 0xff, 0xff, 0xff, 0x7f, 0x40, 1, b'x', 0]]
                .concat();
        assert_eq!(mended(grow.clone(), 8192).await, grow);
        // A 4000-byte entry, then a block of 16,000 references to it (64 MB
        // once decoded).
        let mut first = vec![0x40, 1, b'x', 0x7f];
        integer_rest(&mut first, 4000 - 127);
        first.extend(std::iter::repeat_n(b'v', 4000));
        let mut bytes = PREFACE.to_vec();
        frame(&mut bytes, HEADERS, END_HEADERS, 1, &first);
        frame(&mut bytes, HEADERS, END_HEADERS, 3, &vec![0x80 | 62; 16_000]);
        let out = mended(bytes, 8192).await;
        assert!(out.len() < 64 * 1024, "{} bytes came out", out.len());
    }

    /// grpc-go codes its strings with Huffman's code: a coded authority
    /// is mended too.
    #[tokio::test]
    async fn a_huffman_coded_authority_is_mended() {
        let value = crate::hpack::huffman_encode(b"%2Frun%2Fcryod.sock");
        // GET, http, /, then `:authority` (static name 1) without indexing.
        let mut block = vec![0x82, 0x86, 0x84, 0x01];
        integer(&mut block, value.len(), 7);
        block[4] |= 0x80;
        block.extend_from_slice(&value);
        let mut bytes = PREFACE.to_vec();
        frame(&mut bytes, HEADERS, END_HEADERS, 1, &block);
        let out = mended(bytes, 5).await;
        let fs = frames(&out);
        let got = loona_hpack::Decoder::new().decode(&fs[0].3).unwrap();
        let authority = got.iter().find(|(n, _)| n == b":authority").map(|(_, v)| v.as_slice());
        assert_eq!(authority, Some(LOCALHOST), "{got:?}");
        assert_eq!(got.len(), 4);
    }

    /// The continuation bytes of an HPACK integer past its prefix.
    fn integer_rest(out: &mut Vec<u8>, mut v: usize) {
        while v >= 128 {
            out.push((v % 128 + 128) as u8);
            v /= 128;
        }
        out.push(v as u8);
    }
}
