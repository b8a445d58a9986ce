//! Start-up profiles of `serve --profile <name>`: overrides applied to the
//! loaded [`Settings`] after every layer (files, `ESIM__*` variables), so an
//! explicit variable for any other key still applies.
//!
//! `loadtest` lifts every limit that stands between a load test and this
//! service's own speed: every rate-limit band's every class, the simulated
//! suppliers' limits and latency, and this service's gates on the
//! suppliers (admission then weighs only this service's own settling). It
//! is refused when the simulators are off (production).

use anyhow::bail;

use super::Settings;

/// The profiles `serve --profile` knows.
pub const PROFILES: &[&str] = &["loadtest"];

/// Every band's every class limit under the `loadtest` profile: far above
/// what one machine can send in a window.
pub const LIFTED_BAND_LIMIT: u32 = 100_000_000;

/// Applies the profile `name` to `settings`; returns each setting it lifted,
/// as `key = value`, for the start-up warning. Unknown profiles are refused
/// naming the known ones, and `loadtest` is refused when the simulators are
/// off.
pub fn apply_profile(settings: &mut Settings, name: &str) -> anyhow::Result<Vec<String>> {
    match name {
        "loadtest" => lift_for_load_test(settings),
        other => bail!("unknown profile `{other}` (known: {})", PROFILES.join(", ")),
    }
}

/// The `loadtest` profile.
fn lift_for_load_test(settings: &mut Settings) -> anyhow::Result<Vec<String>> {
    if !settings.simulators.enabled {
        bail!(
            "`serve --profile loadtest` is refused: the simulators are off \
             (`simulators.enabled = false`, a production setup), and the profile \
             lifts every rate limit and the supplier's limits"
        );
    }
    let mut lifted = Vec::new();
    for (band_name, band) in &mut settings.rate_limit.bands {
        for (class, window) in [
            ("read", &mut band.read),
            ("write", &mut band.write),
            ("supplier", &mut band.supplier),
            ("catalogue", &mut band.catalogue),
        ] {
            window.limit = LIFTED_BAND_LIMIT;
            lifted.push(format!(
                "rate_limit.bands.{band_name}.{class}.limit = {LIFTED_BAND_LIMIT}"
            ));
        }
    }
    let sims = &mut settings.simulators;
    sims.supplier_rate_limit = 0;
    sims.airalo_rate_limit_per_minute = 0;
    sims.supplier_latency_ms = 0;
    sims.airalo_latency_ms = 0;
    settings.supplier.requests_per_second = 0;
    settings.airalo.requests_per_second = 0;
    lifted.extend(
        [
            "simulators.supplier_rate_limit = 0",
            "simulators.airalo_rate_limit_per_minute = 0",
            "simulators.supplier_latency_ms = 0",
            "simulators.airalo_latency_ms = 0",
            "supplier.requests_per_second = 0 (admission weighs settling only)",
            "airalo.requests_per_second = 0",
        ]
        .map(str::to_owned),
    );
    settings.validate()?;
    Ok(lifted)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::Sources;

    fn load(overrides: &[(&str, &str)]) -> Settings {
        Settings::load(&Sources {
            dir: Some(PathBuf::from("/nonexistent")),
            env: None,
            use_environment: false,
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
        .expect("settings load")
    }

    #[test]
    fn loadtest_lifts_every_band_and_the_suppliers_and_names_them() {
        let mut settings = load(&[("http.body_limit_bytes", "12345")]);
        let lifted = apply_profile(&mut settings, "loadtest").expect("profile applies");
        for (name, band) in &settings.rate_limit.bands {
            for window in [band.read, band.write, band.supplier, band.catalogue] {
                assert_eq!(window.limit, LIFTED_BAND_LIMIT, "band {name}");
            }
            assert!(
                lifted.contains(&format!(
                    "rate_limit.bands.{name}.write.limit = {LIFTED_BAND_LIMIT}"
                )),
                "{lifted:?}"
            );
        }
        assert_eq!(settings.simulators.supplier_rate_limit, 0);
        assert_eq!(settings.simulators.airalo_latency_ms, 0);
        assert_eq!(settings.supplier.requests_per_second, 0);
        assert_eq!(settings.airalo.requests_per_second, 0);
        assert_eq!(settings.http.body_limit_bytes, 12345, "other keys stay");
        assert!(
            lifted
                .iter()
                .any(|l| l.starts_with("supplier.requests_per_second"))
        );
    }

    #[test]
    fn unknown_profiles_and_production_are_refused() {
        let mut settings = load(&[]);
        let err = apply_profile(&mut settings, "fast").unwrap_err();
        assert!(err.to_string().contains("known: loadtest"), "{err}");
        let mut settings = load(&[
            ("simulators.enabled", "false"),
            ("supplier.base_url", "https://supplier.example"),
        ]);
        let err = apply_profile(&mut settings, "loadtest").unwrap_err();
        assert!(err.to_string().contains("simulators are off"), "{err}");
    }
}
