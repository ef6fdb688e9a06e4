//! A small SMTP server on 127.0.0.1 (RFC 5321's commands, AUTH PLAIN of
//! RFC 4954, no TLS): it keeps every message it is given, with its
//! envelope and the credentials it was given, for the email notifier.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One message as it came.
#[derive(Debug, Clone, Default)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    /// The DATA, headers and body, dot-unstuffed.
    pub data: String,
    /// `user` and `password` from AUTH PLAIN, if it logged in.
    pub login: Option<(String, String)>,
}

pub struct Smtp {
    pub port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl Smtp {
    pub fn start() -> Smtp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().unwrap().port();
        let mails: Arc<Mutex<Vec<Mail>>> = Default::default();
        let kept = mails.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let _ = session(conn, &kept);
                });
            }
        });
        Smtp { port, mails }
    }

    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

fn session(conn: std::net::TcpStream, kept: &Mutex<Vec<Mail>>) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut lines = BufReader::new(conn);
    out.write_all(b"220 localhost ESMTP test\r\n")?;
    let (mut mail, mut login) = (Mail::default(), None);
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") {
            b"250-localhost\r\n250-AUTH PLAIN\r\n250 8BITMIME\r\n"
        } else if upper.starts_with("AUTH PLAIN") {
            let b64 = cmd.split_whitespace().nth(2).unwrap_or("");
            let raw = unbase64(b64);
            let parts: Vec<String> = raw.split(|b| *b == 0).map(|p| String::from_utf8_lossy(p).into_owned()).collect();
            login = (parts.len() == 3).then(|| (parts[1].clone(), parts[2].clone()));
            b"235 2.7.0 authenticated\r\n"
        } else if upper.starts_with("MAIL FROM:") {
            mail = Mail { from: address(&cmd), login: login.clone(), ..Mail::default() };
            b"250 ok\r\n"
        } else if upper.starts_with("RCPT TO:") {
            mail.to.push(address(&cmd));
            b"250 ok\r\n"
        } else if upper == "DATA" {
            out.write_all(b"354 go on\r\n")?;
            let mut data = String::new();
            loop {
                line.clear();
                if lines.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                if line.trim_end_matches(['\r', '\n']) == "." {
                    break;
                }
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            mail.data = data;
            kept.lock().unwrap().push(std::mem::take(&mut mail));
            b"250 2.0.0 queued\r\n"
        } else if upper == "QUIT" {
            out.write_all(b"221 bye\r\n")?;
            return Ok(());
        } else {
            b"250 ok\r\n"
        };
        out.write_all(reply)?;
    }
}

fn address(cmd: &str) -> String {
    cmd.split_once('<').and_then(|(_, r)| r.split_once('>')).map(|(a, _)| a.to_string()).unwrap_or_default()
}

fn unbase64(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let Some(v) = A.iter().position(|a| *a == c) else { continue };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
