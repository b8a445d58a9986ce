//! Reading eSIM Access's answers (recorded shapes:
//! `tests/fixtures/esim_access/`). An answer's `obj` stays text until the
//! call that asked reads it, and a query page is read straight into the few
//! fields kept: its profiles carry some thirty fields each.

use serde::Deserialize;
use serde_json::{Value, value::RawValue};

use crate::supplier::{Profile, SupplierError, Usage};

/// Every answer's envelope, its `obj` kept as text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    /// `true`, or (in some of the documentation's examples) `"true"`.
    #[serde(default)]
    success: Value,
    /// The error's code, a string or (in some answers) a number.
    #[serde(default)]
    error_code: Value,
    /// The error's message, when there is one.
    #[serde(default)]
    error_msg: Value,
    /// What a successful call answered, as sent; `None` when absent or null.
    #[serde(default)]
    obj: Option<Box<RawValue>>,
}

/// The `obj` of a successful answer, as the supplier sent it.
#[derive(Debug)]
pub struct Obj(Option<Box<RawValue>>);

impl Obj {
    /// The text of `obj` (`null` when the answer had none).
    fn text(&self) -> &str {
        self.0.as_deref().map_or("null", RawValue::get)
    }

    /// `obj` as a JSON value, for the small answers read field by field.
    pub fn value(&self) -> Value {
        // A raw value holds JSON that parsed once already.
        serde_json::from_str(self.text()).unwrap_or(Value::Null)
    }
}

/// `obj` of a successful answer, or the error (code, message) it carries;
/// `None` when `answer` is not JSON of the envelope's shape (asked again,
/// like any unreadable answer). Read from bytes: the fields kept and `obj`
/// are checked as UTF-8, the fields skipped only scanned. An answer that is
/// not UTF-8 where it is checked is read as text with the bad bytes
/// replaced, as it always was, so it reads the same either way.
pub fn envelope(answer: impl AsRef<[u8]>) -> Option<Result<Obj, (String, String)>> {
    let answer = answer.as_ref();
    let answer: Envelope = serde_json::from_slice(answer)
        .or_else(|_| serde_json::from_str(&String::from_utf8_lossy(answer)))
        .ok()?;
    Some(opened(answer))
}

/// What an envelope carries: `obj` when `success` says so, else the error.
fn opened(answer: Envelope) -> Result<Obj, (String, String)> {
    // The documentation's own examples spell `success` both as `true` and
    // as `"true"`.
    if answer.success == Value::Bool(true) || answer.success == "true" {
        return Ok(Obj(answer.obj));
    }
    let code = match answer.error_code {
        Value::String(code) => code,
        Value::Number(code) => code.to_string(),
        _ => "unknown".to_owned(),
    };
    let message = answer.error_msg.as_str().unwrap_or("").to_owned();
    Err((code, message))
}

/// The order number of an order answer's `obj`.
pub fn read_order(obj: &Value) -> Result<String, SupplierError> {
    obj["orderNo"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| SupplierError::Transient("order: no orderNo in the answer".into()))
}

/// One query page's `obj`: the profiles and the pager, every other field
/// skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryPage {
    /// The page's profiles.
    esim_list: Option<Vec<ListedProfile>>,
    /// How many profiles the order has in all.
    pager: Option<Pager>,
}

/// The three fields of a listed profile this service keeps.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedProfile {
    /// The profile's ICCID (empty until allocated).
    #[serde(default)]
    iccid: Value,
    /// Its activation code, `LPA:1$...` (empty until allocated).
    #[serde(default)]
    ac: Value,
    /// The supplier's number for the profile, which its usage is asked by.
    #[serde(default)]
    esim_tran_no: Value,
}

/// A query page's pager.
#[derive(Deserialize)]
struct Pager {
    /// The order's profiles in all pages.
    #[serde(default)]
    total: Value,
}

/// The profiles of one query page's `obj`, and the total the pager reports.
pub fn read_profiles(obj: &Obj) -> Result<(Vec<Profile>, Option<u64>), SupplierError> {
    let no_list = || SupplierError::Transient("query: no esimList in the answer".into());
    let page: QueryPage = serde_json::from_str(obj.text()).map_err(|_| no_list())?;
    let list = page.esim_list.ok_or_else(no_list)?;
    let mut profiles = Vec::with_capacity(list.len());
    for entry in list {
        // A profile is usable once it has an ICCID and an activation code.
        if let (Value::String(iccid), Value::String(ac)) = (entry.iccid, entry.ac)
            && !iccid.is_empty()
            && !ac.is_empty()
        {
            profiles.push(Profile {
                iccid,
                activation_code: ac,
                esim_tran_no: entry.esim_tran_no.as_str().map(str::to_owned),
            });
        }
    }
    Ok((profiles, page.pager.and_then(|pager| pager.total.as_u64())))
}

/// The usage of one profile in a usage answer's `obj`.
pub fn read_usage(obj: &Value, esim_tran_no: &str) -> Result<Usage, SupplierError> {
    const MB: i64 = 1024 * 1024;
    // `obj.esimUsageList`, or (in one version of the documentation) `obj`
    // itself as the list.
    let rows = obj["esimUsageList"].as_array().or_else(|| obj.as_array());
    let row = rows
        .and_then(|rows| rows.iter().find(|r| r["esimTranNo"] == esim_tran_no))
        .ok_or_else(|| {
            SupplierError::Transient("usage: the profile is not in the answer".into())
        })?;
    match (row["dataUsage"].as_i64(), row["totalData"].as_i64()) {
        (Some(used), Some(total)) => Ok(Usage {
            data_used_mb: used / MB,
            data_total_mb: total / MB,
        }),
        _ => Err(SupplierError::Transient("usage: malformed answer".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supplier::esim_access::{ALLOCATING, ErrorClass, classify};
    use serde_json::json;

    /// A recorded payload of the real API (see the fixtures' README for
    /// where each shape comes from).
    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/esim_access/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The `obj` of a recorded successful answer.
    fn obj_of(name: &str) -> Obj {
        envelope(fixture(name))
            .unwrap_or_else(|| panic!("{name}: not an envelope"))
            .unwrap_or_else(|error| panic!("{name}: {error:?}"))
    }

    fn code_of(name: &str) -> String {
        envelope(fixture(name))
            .unwrap_or_else(|| panic!("{name}: not an envelope"))
            .expect_err(name)
            .0
    }

    #[test]
    fn an_order_answer_gives_its_order_number() {
        let order_no = read_order(&obj_of("order_ok.json").value()).unwrap();
        assert!(order_no.starts_with('B'), "{order_no}");
    }

    #[test]
    fn profiles_still_being_allocated_are_pending_not_refused() {
        let code = code_of("query_allocating.json");
        assert_eq!(code, ALLOCATING);
        assert_eq!(classify(&code), ErrorClass::Transient);
    }

    #[test]
    fn a_query_answer_gives_every_profile_with_its_esim_tran_no() {
        let (profiles, total) = read_profiles(&obj_of("query_ok_two_profiles.json")).unwrap();
        assert_eq!(profiles.len(), 2);
        assert_eq!(total, Some(2));
        for profile in &profiles {
            assert!(profile.activation_code.starts_with("LPA:1$"), "{profile:?}");
            assert!(profile.esim_tran_no.is_some(), "{profile:?}");
            assert!(
                crate::domain::esim::is_valid_iccid(&profile.iccid),
                "{profile:?}"
            );
        }
    }

    #[test]
    fn usage_is_read_by_esim_tran_no_in_megabytes() {
        let obj = obj_of("usage_ok.json").value();
        let first = obj["esimUsageList"][0]["esimTranNo"]
            .as_str()
            .unwrap()
            .to_owned();
        let used = obj["esimUsageList"][0]["dataUsage"].as_i64().unwrap();
        let usage = read_usage(&obj, &first).unwrap();
        assert_eq!(usage.data_used_mb, used / (1024 * 1024));
        assert!(usage.data_total_mb > 0);
        assert!(read_usage(&obj, "not-there").is_err());
    }

    #[test]
    fn the_recorded_busy_answer_is_a_slow_down() {
        let Some(Err((code, message))) = envelope(fixture("order_error_system_busy.json")) else {
            panic!("the recorded busy answer is an error envelope");
        };
        let error =
            crate::supplier::esim_access::classified("/api/v1/open/esim/order", &code, &message);
        assert!(
            matches!(error, crate::supplier::SupplierError::SlowDown(_)),
            "{error:?}"
        );
    }

    #[test]
    fn transient_codes_are_asked_again_and_refusals_refund() {
        for (name, class) in [
            ("order_error_system_busy.json", ErrorClass::Transient),
            ("order_error_timestamp.json", ErrorClass::Transient),
            ("order_error_signature.json", ErrorClass::Refused),
            ("order_error_insufficient_balance.json", ErrorClass::Refused),
            ("order_error_package_not_exist.json", ErrorClass::Refused),
            ("order_error_no_profiles.json", ErrorClass::Refused),
            ("query_error_order_not_exist.json", ErrorClass::Refused),
        ] {
            assert_eq!(classify(&code_of(name)), class, "{name}");
        }
        assert_eq!(classify("123456"), ErrorClass::Unknown);
    }

    #[test]
    fn statuses_that_say_nothing_certain_about_a_purchase_are_asked_again() {
        assert_eq!(classify("200009"), ErrorClass::Unknown);
        assert_eq!(classify("200002"), ErrorClass::Unknown);
    }

    #[test]
    fn the_order_status_webhook_names_the_order_and_its_state() {
        let hook: Value = serde_json::from_str(&fixture("webhook_order_status.json")).unwrap();
        assert_eq!(hook["notifyType"], "ORDER_STATUS");
        assert!(hook["content"]["orderNo"].as_str().is_some());
        assert_eq!(hook["content"]["orderStatus"], "GOT_RESOURCE");
    }

    #[test]
    fn numeric_error_codes_read_like_strings() {
        let answer = json!({ "success": false, "errorCode": 900001, "errorMsg": "busy" });
        let (code, message) = envelope(answer.to_string()).unwrap().unwrap_err();
        assert_eq!((code.as_str(), message.as_str()), ("900001", "busy"));
    }

    #[test]
    fn success_spelled_as_a_string_is_success() {
        let obj = obj_of("order_ok_string_success.json").value();
        assert_eq!(read_order(&obj).unwrap(), "B22102010075311");
    }

    #[test]
    fn usage_answered_as_a_bare_list_reads_the_same() {
        let obj = obj_of("usage_ok_list_obj.json").value();
        let usage = read_usage(&obj, "25030303480009").unwrap();
        assert_eq!(usage.data_used_mb, 1453344832 / (1024 * 1024));
        assert_eq!(usage.data_total_mb, 5120);
    }

    /// A query page read field by field: profiles the supplier has not
    /// finished (no ICCID or activation code yet) are left for a later query,
    /// fields of other types are skipped, and the pager's total is kept.
    #[test]
    fn a_query_page_keeps_only_finished_profiles() {
        let answer = json!({
            "success": true,
            "obj": {
                "esimList": [
                    { "iccid": "8943108170000775671", "ac": "LPA:1$a$b", "esimTranNo": "1", "packageList": [{}] },
                    { "iccid": "8943108170000775689", "ac": "", "esimTranNo": "2" },
                    { "iccid": "", "ac": "LPA:1$a$c" },
                    { "iccid": 8943108170000775697u64, "ac": "LPA:1$a$d" },
                    { "iccid": "8943108170000775705", "ac": "LPA:1$a$e", "esimTranNo": null }
                ],
                "pager": { "pageNum": 1, "pageSize": 100, "total": 5 }
            }
        });
        let obj = envelope(answer.to_string()).unwrap().unwrap();
        let (profiles, total) = read_profiles(&obj).unwrap();
        let kept: Vec<(&str, Option<&str>)> = profiles
            .iter()
            .map(|p| (p.iccid.as_str(), p.esim_tran_no.as_deref()))
            .collect();
        assert_eq!(
            kept,
            [
                ("8943108170000775671", Some("1")),
                ("8943108170000775705", None)
            ]
        );
        assert_eq!(total, Some(5));
    }

    /// Answers that are not what the protocol sends are transient (asked
    /// again), never a panic: text that is not an envelope, a success
    /// without `obj`, a list that is not a list.
    #[test]
    fn answers_out_of_shape_are_asked_again() {
        assert!(envelope("<html>busy</html>").is_none());
        assert!(envelope(r#"{"success":true,"obj":"#).is_none());
        assert_eq!(envelope("[]").unwrap().unwrap_err().0, "unknown");
        let no_obj = envelope(r#"{"success":true}"#).unwrap().unwrap();
        assert!(matches!(
            read_profiles(&no_obj),
            Err(SupplierError::Transient(_))
        ));
        assert!(read_order(&no_obj.value()).is_err());
        let not_a_list = envelope(r#"{"success":true,"obj":{"esimList":"none"}}"#)
            .unwrap()
            .unwrap();
        assert!(matches!(
            read_profiles(&not_a_list),
            Err(SupplierError::Transient(_))
        ));
        let (code, _) = envelope(r#"{"success":false,"obj":null}"#)
            .unwrap()
            .unwrap_err();
        assert_eq!(code, "unknown");
    }

    /// How an answer was read before: `reqwest`'s `text()` (its bytes as
    /// UTF-8, any bad byte replaced), then parsed as text.
    fn envelope_of_text(answer: &[u8]) -> Option<Result<Obj, (String, String)>> {
        serde_json::from_str(&String::from_utf8_lossy(answer))
            .ok()
            .map(opened)
    }

    proptest::proptest! {
        /// Read from bytes, an answer reads as it did through `text()`:
        /// the same `obj`, the same code and message, the same refusal of
        /// what is not an envelope, bad UTF-8 anywhere included.
        #[test]
        fn answers_read_from_bytes_as_from_text(
            success in proptest::sample::select(vec!["true", "\"true\"", "false", "1"]),
            pieces in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec![b'a', b'7', b' ', b'"', b'\\', 0xc3, 0xa9, 0xff, 0x80]),
                    0..6,
                ),
                4,
            ),
        ) {
            let mut answer = format!("{{\"success\":{success},\"errorCode\":\"").into_bytes();
            answer.extend(&pieces[0]);
            answer.extend(b"\",\"errorMsg\":\"");
            answer.extend(&pieces[1]);
            answer.extend(b"\",\"skipped\":\"");
            answer.extend(&pieces[2]);
            answer.extend(b"\",\"obj\":{\"orderNo\":\"");
            answer.extend(&pieces[3]);
            answer.extend(b"\"}}");
            let read = format!("{:?}", envelope(&answer).map(|r| r.map(|obj| obj.value())));
            let old = format!("{:?}", envelope_of_text(&answer).map(|r| r.map(|obj| obj.value())));
            proptest::prop_assert_eq!(read, old);
        }
    }
}
