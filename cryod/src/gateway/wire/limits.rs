//! What a response's rate-limit headers say of the account: a refusal's
//! wait (`retry-after`, `retry-after-ms`), or capacity near its end
//! (Anthropic's `anthropic-ratelimit-*`, OpenAI's `x-ratelimit-*`) until
//! the limit resets.

use std::time::Duration;

/// What a response's headers say of the account's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Pressure {
    /// How long until the account may be asked again.
    pub wait: Duration,
    /// The request was refused (429); else capacity is near its end.
    pub refused: bool,
    /// Which header said so, for status and the hub.
    pub source: String,
}

/// Remaining capacity at or under this share of the limit holds new wakes.
const NEAR_ZERO: f64 = 0.05;

/// Reads the rate-limit headers of a response (`get` looks one up, lowered).
/// A 429 holds the account for the wait the provider gave (`retry-after`,
/// `retry-after-ms`, else the latest reset of a limit at zero); a success
/// whose remaining requests or tokens are at or under 5% of the limit holds
/// new wakes until that limit resets. `now_unix` reads RFC 3339 resets.
pub fn pressure(status: u16, get: impl Fn(&str) -> Option<String>, now_unix: f64) -> Option<Pressure> {
    let refused = status == 429;
    let told = get("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|ms| (Duration::from_secs_f64((ms / 1000.0).max(0.0)), "retry-after-ms".to_string()))
        .or_else(|| get("retry-after").and_then(|v| retry_after(&v, now_unix)).map(|d| (d, "retry-after".to_string())));
    // Each limit the headers name: (limit, remaining, reset in, header).
    let mut limits: Vec<(Option<f64>, f64, Option<Duration>, String)> = Vec::new();
    for what in ["requests", "tokens", "input-tokens", "output-tokens"] {
        let name = format!("anthropic-ratelimit-{what}-remaining");
        if let Some(rem) = get(&name).and_then(|v| v.trim().parse::<f64>().ok()) {
            let limit = get(&format!("anthropic-ratelimit-{what}-limit")).and_then(|v| v.trim().parse().ok());
            let reset = get(&format!("anthropic-ratelimit-{what}-reset")).and_then(|v| until_rfc3339(&v, now_unix));
            limits.push((limit, rem, reset, name));
        }
    }
    for what in ["requests", "tokens"] {
        let name = format!("x-ratelimit-remaining-{what}");
        if let Some(rem) = get(&name).and_then(|v| v.trim().parse::<f64>().ok()) {
            let limit = get(&format!("x-ratelimit-limit-{what}")).and_then(|v| v.trim().parse().ok());
            let reset = get(&format!("x-ratelimit-reset-{what}")).and_then(|v| go_duration(&v));
            limits.push((limit, rem, reset, name));
        }
    }
    let low = |(limit, rem, _, _): &&(Option<f64>, f64, Option<Duration>, String)| match limit {
        Some(l) if *l > 0.0 => *rem <= l * NEAR_ZERO,
        _ => *rem <= 0.0,
    };
    let exhausted = limits
        .iter()
        .filter(low)
        .filter_map(|(_, rem, reset, name)| reset.map(|r| (r, rem, name)))
        .max_by_key(|(r, _, _)| *r);
    if refused {
        if let Some((wait, header)) = told {
            return Some(Pressure { wait, refused, source: format!("the provider refused (429) with {header}") });
        }
        return exhausted.map(|(wait, rem, name)| Pressure {
            wait,
            refused,
            source: format!("the provider refused (429); {name}: {rem} until its reset"),
        });
    }
    exhausted.filter(|(wait, _, _)| !wait.is_zero()).map(|(wait, rem, name)| Pressure {
        wait,
        refused,
        source: format!("{name}: {rem}, near zero, until its reset"),
    })
}

/// `retry-after`: seconds, or an HTTP date.
fn retry_after(v: &str, now_unix: f64) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some(Duration::from_secs_f64((at.timestamp() as f64 - now_unix).max(0.0)))
}

/// Anthropic's resets: an RFC 3339 instant.
fn until_rfc3339(v: &str, now_unix: f64) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(v.trim()).ok()?;
    let secs = at.timestamp() as f64 + f64::from(at.timestamp_subsec_millis()) / 1000.0 - now_unix;
    Some(Duration::from_secs_f64(secs.max(0.0)))
}

/// OpenAI's resets: a Go duration (`1s`, `6m0s`, `20ms`, `1h2m3.5s`).
fn go_duration(v: &str) -> Option<Duration> {
    let mut rest = v.trim();
    let mut total = 0.0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_429_holds_for_what_the_provider_said() {
        let p = pressure(429, headers(&[("retry-after", "90")]), 0.0).unwrap();
        assert_eq!((p.wait, p.refused), (Duration::from_secs(90), true));
        assert!(p.source.contains("retry-after"), "{}", p.source);
        let p = pressure(429, headers(&[("retry-after-ms", "1500"), ("retry-after", "2")]), 0.0).unwrap();
        assert_eq!(p.wait, Duration::from_millis(1500));
        let p = pressure(
            429,
            headers(&[
                ("anthropic-ratelimit-tokens-remaining", "0"),
                ("anthropic-ratelimit-tokens-reset", "1970-01-01T00:02:00Z"),
            ]),
            60.0,
        )
        .unwrap();
        assert_eq!(p.wait, Duration::from_secs(60));
        assert!(pressure(429, headers(&[]), 0.0).is_none(), "no word: the supervisor's default");
        let date = pressure(429, headers(&[("retry-after", "Thu, 01 Jan 1970 00:01:40 GMT")]), 40.0).unwrap();
        assert_eq!(date.wait, Duration::from_secs(60));
    }

    #[test]
    fn near_zero_holds_new_wakes_until_the_reset() {
        let p = pressure(
            200,
            headers(&[
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "40"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ]),
            0.0,
        )
        .unwrap();
        assert_eq!((p.wait, p.refused), (Duration::from_secs(360), false));
        assert!(p.source.starts_with("x-ratelimit-remaining-tokens: 40"), "{}", p.source);
        let plenty = headers(&[
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", "900"),
            ("x-ratelimit-reset-tokens", "1s"),
        ]);
        assert!(pressure(200, plenty, 0.0).is_none());
        assert_eq!(go_duration("1h2m3.5s"), Some(Duration::from_secs_f64(3723.5)));
        assert_eq!(go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(go_duration("later"), None);
    }
}
