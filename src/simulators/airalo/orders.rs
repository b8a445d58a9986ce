//! The simulated catalogue and orders, rendered in the shapes of Airalo's
//! documentation (Submit order, Get order, Get order list, Get packages,
//! Get usage; recorded in `tests/fixtures/airalo/`).

use chrono::{DateTime, Duration as Days, Utc};
use serde_json::{Value, json};

use crate::{domain::esim, supplier::Profile};

/// SM-DP+ address of simulated profiles.
pub(crate) const SIM_SMDP: &str = "smdp.sim-airalo.esim-reseller.invalid";
/// Sandbox package that answers 422 code 11 (insufficient credit).
pub(crate) const TEST_INSUFFICIENT_BALANCE: &str = "test-insufficient-balance-7days-1gb";
/// Sandbox package that answers 422 code 33 (insufficient stock).
pub(crate) const TEST_OUT_OF_STOCK: &str = "test-out-of-stock-7days-1gb";
/// Packages `GET /v2/packages` lists (any id of the same form is sold).
const LISTED: [&str; 4] = [
    "simulated-7days-1gb",
    "simulated-30days-3gb",
    "simulated-30days-10gb",
    "simulated-7days-unlimited",
];

/// A package id the simulator sells: `<slug>-<N>days-<M>gb` or
/// `<slug>-<N>days-unlimited`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Package {
    /// The package id as ordered.
    pub(crate) id: String,
    /// The operator part of the id.
    pub(crate) slug: String,
    /// Validity in days.
    pub(crate) days: u32,
    /// Data in megabytes; `None` for unlimited.
    pub(crate) data_mb: Option<u32>,
}

impl Package {
    /// Reads a package id; `None` for any other form.
    pub(crate) fn parse(id: &str) -> Option<Self> {
        let (rest, volume) = id.rsplit_once('-')?;
        let (slug, validity) = rest.rsplit_once('-')?;
        let days: u32 = validity.strip_suffix("days")?.parse().ok()?;
        let data_mb = match volume {
            "unlimited" => None,
            gb => Some(
                gb.strip_suffix("gb")?
                    .parse::<u32>()
                    .ok()?
                    .checked_mul(1024)?,
            ),
        };
        (!slug.is_empty() && days > 0 && data_mb != Some(0)).then(|| Self {
            id: id.to_owned(),
            slug: slug.to_owned(),
            days,
            data_mb,
        })
    }

    /// Recommended retail price, USD.
    pub(crate) fn price(&self) -> f64 {
        let base = match self.data_mb {
            Some(mb) => 2.0 + f64::from(mb / 1024) * 1.5,
            None => 20.0,
        };
        cents(base + f64::from(self.days) * 0.1)
    }

    /// Wholesale price of one eSIM, USD.
    pub(crate) fn net_price(&self) -> f64 {
        cents(self.price() * 0.7)
    }

    /// `"1 GB"`, or `"Unlimited"`.
    fn data(&self) -> String {
        self.data_mb
            .map_or_else(|| "Unlimited".to_owned(), |mb| format!("{} GB", mb / 1024))
    }

    /// `"Simulated-1 GB - 7 Days"`, as the documentation titles a package.
    fn title(&self) -> String {
        format!(
            "{}-{} - {} Days",
            capitalized(&self.slug),
            self.data(),
            self.days
        )
    }
}

fn cents(usd: f64) -> f64 {
    (usd * 100.0).round() / 100.0
}

fn capitalized(slug: &str) -> String {
    let mut chars = slug.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// An order the simulator took.
pub(crate) struct SimOrder {
    /// Airalo's order id.
    pub(crate) id: u64,
    /// When it was taken.
    pub(crate) created_at: DateTime<Utc>,
    /// What was ordered.
    pub(crate) package: Package,
    /// eSIMs in the order.
    pub(crate) quantity: u32,
    /// The partner's description (our transaction id).
    pub(crate) description: Option<String>,
    /// One profile per eSIM.
    pub(crate) profiles: Vec<Profile>,
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

impl SimOrder {
    /// `20230227-009666`, as Airalo writes an order code.
    pub(crate) fn code(&self) -> String {
        format!("{}-{:06}", self.created_at.format("%Y%m%d"), self.id)
    }

    /// The order in the shape of the Submit order answer's `data`.
    pub(crate) fn json(&self, sims: bool, status: bool) -> Value {
        let mut order = json!({
            "id": self.id,
            "code": self.code(),
            "currency": "USD",
            "package_id": self.package.id,
            "quantity": self.quantity,
            "type": "sim",
            "description": self.description,
            "esim_type": "Prepaid",
            "validity": self.package.days,
            "package": self.package.title(),
            "data": self.package.data(),
            "price": self.package.price(),
            "pricing_model": "net_pricing",
            "created_at": timestamp(self.created_at),
            "manual_installation": "<p><b>eSIM name:</b> Simulated</p>",
            "qrcode_installation": "<p><b>eSIM name:</b> Simulated</p>",
            "installation_guides": { "en": "https://sim-airalo.esim-reseller.invalid/installation-guide" },
            "text": null,
            "voice": null,
            "net_price": self.package.net_price(),
            "brand_settings_name": null,
        });
        if sims {
            let sims: Vec<Value> = (0..)
                .zip(&self.profiles)
                .map(|(n, p)| self.sim(n, p))
                .collect();
            order["sims"] = Value::Array(sims);
        }
        if status {
            order["status"] = json!({ "name": "Completed", "slug": "completed" });
        }
        order
    }

    /// One entry of `sims`.
    fn sim(&self, n: u64, profile: &Profile) -> Value {
        let (lpa, matching) =
            esim::parse_activation_code(&profile.activation_code).unwrap_or((SIM_SMDP, "UNKNOWN"));
        json!({
            "id": self.id * 100 + n,
            "created_at": timestamp(self.created_at),
            "iccid": profile.iccid,
            "lpa": lpa,
            "imsis": null,
            "matching_id": matching,
            "qrcode": profile.activation_code,
            "qrcode_url": format!("https://sim-airalo.esim-reseller.invalid/qr?id={}", self.id * 100 + n),
            "airalo_code": null,
            "apn_type": "automatic",
            "apn_value": null,
            "is_roaming": true,
            "confirmation_code": null,
            "apn": {
                "ios": { "apn_type": "automatic", "apn_value": null },
                "android": { "apn_type": "automatic", "apn_value": null },
            },
            "msisdn": null,
            "direct_apple_installation_url": esim::apple_install_url(&profile.activation_code),
        })
    }

    /// The Get usage answer's `data` for one of its eSIMs: a stable made-up
    /// figure per ICCID, some of the data used.
    pub(crate) fn usage(&self, iccid: &str) -> Value {
        let expired_at = timestamp(self.created_at + Days::days(i64::from(self.package.days)));
        let Some(total) = self.package.data_mb else {
            // "For unlimited packages the remaining, total and amount fields
            // will default to 0".
            return json!({
                "remaining": 0, "total": 0, "expired_at": expired_at, "is_unlimited": true,
                "status": "ACTIVE", "remaining_voice": 0, "remaining_text": 0,
                "total_voice": 0, "total_text": 0,
            });
        };
        let used = iccid.bytes().map(u32::from).sum::<u32>() % (total / 2 + 1);
        json!({
            "remaining": total - used,
            "total": total,
            "expired_at": expired_at,
            "is_unlimited": false,
            "status": if used > 0 { "ACTIVE" } else { "NOT_ACTIVE" },
            "remaining_voice": 0,
            "remaining_text": 0,
            "total_voice": 0,
            "total_text": 0,
        })
    }
}

/// The Get packages answer: one simulated country and its packages.
pub(crate) fn packages() -> Value {
    let packages: Vec<Value> = LISTED
        .iter()
        .filter_map(|id| Package::parse(id))
        .map(|p| {
            json!({
                "id": p.id,
                "type": "sim",
                "price": p.price(),
                "net_price": p.net_price(),
                "amount": p.data_mb.unwrap_or(0),
                "day": p.days,
                "is_unlimited": p.data_mb.is_none(),
                "title": format!("{} - {} Days", p.data(), p.days),
                "data": p.data(),
                "short_info": "This eSIM doesn't come with a phone number.",
            })
        })
        .collect();
    json!({
        "data": [{
            "slug": "simulated",
            "country_code": "XS",
            "title": "Simulated",
            "operators": [{
                "id": 1,
                "type": "local",
                "title": "Simulated",
                "esim_type": "Prepaid",
                "is_roaming": true,
                "plan_type": "data",
                "activation_policy": "first-usage",
                "packages": packages,
            }],
        }],
        "links": { "first": null, "last": null, "prev": null, "next": null },
        "meta": { "message": "success", "current_page": 1, "last_page": 1, "total": 1 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_ids_are_read_as_the_catalogue_writes_them() {
        let p = Package::parse("kallur-digital-7days-1gb").unwrap();
        assert_eq!(
            (p.slug.as_str(), p.days, p.data_mb),
            ("kallur-digital", 7, Some(1024))
        );
        assert_eq!(
            Package::parse("world-15days-unlimited").unwrap().data_mb,
            None
        );
        for bad in [
            "",
            "7days-1gb",
            "x-0days-1gb",
            "x-7days-0gb",
            "x-7day-1gb",
            "x-7days-1mb",
        ] {
            assert_eq!(Package::parse(bad), None, "{bad}");
        }
        assert!(p.net_price() < p.price());
    }
}
