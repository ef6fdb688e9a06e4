//! Web Push, the sending side: a notice encrypted for one browser
//! subscription (RFC 8291, `aes128gcm` of RFC 8188) and delivered to its
//! push service (RFC 8030) with a VAPID signature (RFC 8292). The VAPID key
//! pair is made once and kept 0600 in cryod's state folder; the browsers'
//! subscriptions sit beside it (`push-subscriptions.json`, 0600), added by
//! the hub's "notify this device".

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SecureRandom;
use ring::{aead, agreement, hkdf, rand, signature};
use serde::{Deserialize, Serialize};

use super::{Error, Refused};

/// A browser's push subscription, as `PushSubscription.toJSON()` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub endpoint: String,
    pub keys: Keys,
    /// What the page called the device.
    #[serde(default)]
    pub name: String,
}

/// A subscription's keys: what a notice is encrypted for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keys {
    /// The browser's P-256 public key, uncompressed, base64url.
    pub p256dh: String,
    /// Its 16-byte authentication secret, base64url.
    pub auth: String,
}

/// The records' size announced in the header (one record carries it all).
const RECORD_SIZE: u32 = 4096;
/// The largest notice sent (RFC 8030 services take at least 4 KiB).
pub const MAX_PAYLOAD: usize = 3000;

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand(prk: &hkdf::Prk, info: &[&[u8]], len: usize) -> Result<Vec<u8>, Error> {
    let mut out = vec![0u8; len];
    prk.expand(info, Len(len)).and_then(|okm| okm.fill(&mut out)).map_err(|_| Error::Crypto("HKDF failed"))?;
    Ok(out)
}

/// A failure of the cryptography, whatever ring's error: `why` says which step.
fn crypto<E>(why: &'static str) -> impl FnOnce(E) -> Error {
    move |_| Error::Crypto(why)
}

/// The body for `sub`: `payload` encrypted as RFC 8291 says.
pub fn encrypt(sub: &Subscription, payload: &[u8]) -> Result<Vec<u8>, Error> {
    let rng = rand::SystemRandom::new();
    let ua_public = B64.decode(sub.keys.p256dh.trim_end_matches('=')).map_err(crypto("p256dh is not base64url"))?;
    let auth = B64.decode(sub.keys.auth.trim_end_matches('=')).map_err(crypto("auth is not base64url"))?;
    if ua_public.len() != 65 || auth.len() != 16 {
        return Err(Error::Crypto("the subscription's keys have the wrong length"));
    }
    let mine = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).map_err(crypto("no key"))?;
    let as_public = mine.compute_public_key().map_err(crypto("no key"))?.as_ref().to_vec();
    let peer = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, &ua_public);
    let ecdh =
        agreement::agree_ephemeral(mine, &peer, |s| s.to_vec()).map_err(crypto("the browser's key is not on P-256"))?;
    // IKM = HKDF(auth, ecdh, "WebPush: info" 0 ua_public as_public, 32)
    let prk_key = hkdf::Salt::new(hkdf::HKDF_SHA256, &auth).extract(&ecdh);
    let ikm = expand(&prk_key, &[b"WebPush: info\0", &ua_public, &as_public], 32)?;
    let mut salt = [0u8; 16];
    rng.fill(&mut salt).map_err(crypto("no randomness"))?;
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(&ikm);
    let cek = expand(&prk, &[b"Content-Encoding: aes128gcm\0"], 16)?;
    let nonce = expand(&prk, &[b"Content-Encoding: nonce\0"], 12)?;
    // One record: the payload, then the last record's delimiter.
    let mut record = payload.to_vec();
    record.push(2);
    let key = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &cek).map_err(crypto("bad key"))?);
    let nonce = aead::Nonce::try_assume_unique_for_key(&nonce).map_err(crypto("bad nonce"))?;
    key.seal_in_place_append_tag(nonce, aead::Aad::empty(), &mut record).map_err(crypto("cannot encrypt"))?;
    let mut body = Vec::with_capacity(16 + 4 + 1 + 65 + record.len());
    body.extend_from_slice(&salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(as_public.len() as u8);
    body.extend_from_slice(&as_public);
    body.extend_from_slice(&record);
    Ok(body)
}

/// cryod's VAPID key pair (ECDSA P-256), made once, kept 0600.
pub struct Vapid {
    pair: signature::EcdsaKeyPair,
}

impl Vapid {
    /// Reads the key from `dir/vapid.pk8`, or makes it.
    pub fn load_or_make(dir: &Path) -> Result<Vapid, Error> {
        let rng = rand::SystemRandom::new();
        let path = dir.join("vapid.pk8");
        let pk8 = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = signature::EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| Error::Crypto("cannot make a VAPID key"))?;
                crate::chamber::write_secret(&path, doc.as_ref()).map_err(Error::io(&path))?;
                doc.as_ref().to_vec()
            }
            Err(e) => return Err(Error::io(&path)(e)),
        };
        let pair = signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &pk8, &rng)
            .map_err(|error| Error::Key { path: path.clone(), error })?;
        Ok(Vapid { pair })
    }

    /// The public key, uncompressed, base64url: the page's
    /// `applicationServerKey` and the `k` of every request.
    pub fn public(&self) -> String {
        use signature::KeyPair;
        B64.encode(self.pair.public_key().as_ref())
    }

    /// `Authorization: vapid t=JWT, k=KEY` for a push to `endpoint`, valid
    /// for 12 hours from `now` (Unix seconds).
    pub fn authorization(&self, endpoint: &str, now: i64, contact: &str) -> Result<String, Error> {
        let url = reqwest::Url::parse(endpoint).map_err(Error::Endpoint)?;
        let aud = url.origin().ascii_serialization();
        let header = B64.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({ "aud": aud, "exp": now + 12 * 3600, "sub": contact });
        let claims = B64.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let sig =
            self.pair.sign(&rand::SystemRandom::new(), signed.as_bytes()).map_err(|_| Error::Crypto("cannot sign"))?;
        Ok(format!("vapid t={signed}.{}, k={}", B64.encode(sig.as_ref()), self.public()))
    }
}

/// What a page may subscribe: an https push service (or one on this
/// machine, for tests and local services) and keys of the right size.
pub fn check(sub: &Subscription) -> Result<(), Refused> {
    let url = reqwest::Url::parse(&sub.endpoint).map_err(Refused::Endpoint)?;
    let local = matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    if url.scheme() != "https" && !(url.scheme() == "http" && local) {
        return Err(Refused::NotHttps);
    }
    let len = |s: &str| B64.decode(s.trim_end_matches('=')).map(|b| b.len()).unwrap_or(0);
    if len(&sub.keys.p256dh) != 65 || len(&sub.keys.auth) != 16 {
        return Err(Refused::Keys);
    }
    if sub.name.chars().count() > 100 {
        return Err(Refused::Name);
    }
    Ok(())
}

/// The subscriptions file beside the key.
pub fn subscriptions_path(dir: &Path) -> PathBuf {
    dir.join("push-subscriptions.json")
}

/// The devices subscribed (none if the file is missing or unreadable).
pub fn subscriptions(dir: &Path) -> Vec<Subscription> {
    std::fs::read(subscriptions_path(dir)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Replaces the subscriptions file (0600) with `subs`.
pub fn save_subscriptions(dir: &Path, subs: &[Subscription]) -> Result<(), Error> {
    let path = subscriptions_path(dir);
    let text = serde_json::to_vec_pretty(subs)?;
    crate::chamber::write_secret(&path, &text).map_err(Error::io(&path))
}
