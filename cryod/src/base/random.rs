//! Random names and secrets, from the OS's source.

/// `bytes` random bytes as lowercase hex.
pub fn hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("the OS random source works");
    ::hex::encode(b)
}
