//! Parsing the bodies of the plan and credit endpoints at the edge, into the domain's
//! typed requests: every refusal names the field.

use serde_json::{Map, Value};

use crate::domain::credits::plans::PlanId;
use crate::domain::credits::service::{CreditError, SettingsChange, UpgradeRequest, MAX_URL_BYTES};
use crate::domain::credits::MAX_TOP_UP_SETTING;

/// A body's object, refusing other types and properties not in `known`.
fn object<'a>(value: &'a Value, what: &str, known: &[&str]) -> Result<&'a Map<String, Value>, CreditError> {
    crate::core::json::closed_object(value, what, known).map_err(CreditError::Invalid)
}

/// `POST /credits/settings {auto_topup: {enabled, threshold, quantity, monthly_limit,
/// cover_shortfall}}`: each number a whole 0–1,000,000; fields left out keep their value.
pub fn settings_change(body: &Value) -> Result<SettingsChange, CreditError> {
    let settings = object(body, "the body", &["auto_topup"])?;
    let given = settings.get("auto_topup").ok_or_else(|| CreditError::Invalid("auto_topup is required".into()))?;
    let fields =
        object(given, "auto_topup", &["enabled", "threshold", "quantity", "monthly_limit", "cover_shortfall"])?;
    let flag = |name: &str| match fields.get(name) {
        None => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(CreditError::Invalid(format!("auto_topup.{name} must be true or false"))),
    };
    let (enabled, cover_shortfall) = (flag("enabled")?, flag("cover_shortfall")?);
    let number = |name: &str| -> Result<Option<u64>, CreditError> {
        match fields.get(name) {
            None => Ok(None),
            Some(value) => match value.as_u64().filter(|number| *number <= MAX_TOP_UP_SETTING) {
                Some(number) => Ok(Some(number)),
                None => Err(CreditError::Invalid(format!(
                    "auto_topup.{name} must be a whole number from 0 to {MAX_TOP_UP_SETTING}, not {value}"
                ))),
            },
        }
    };
    let (threshold, quantity, monthly_limit) = (number("threshold")?, number("quantity")?, number("monthly_limit")?);
    Ok(SettingsChange { enabled, threshold, quantity, monthly_limit, cover_shortfall })
}

/// `POST /plan/upgrade {plan_id, success_url?, cancel_url?}`.
pub fn upgrade_request(body: &Value) -> Result<UpgradeRequest, CreditError> {
    let fields = object(body, "the body", &["plan_id", "success_url", "cancel_url"])?;
    let plan_id = match fields.get("plan_id") {
        Some(Value::String(text)) => text,
        Some(_) => return Err(CreditError::Invalid("plan_id must be a string".into())),
        None => return Err(CreditError::Invalid("plan_id is required".into())),
    };
    let known = PlanId::ALL.map(PlanId::as_str).join(", ");
    let plan = PlanId::parse(plan_id)
        .ok_or_else(|| CreditError::Invalid(format!("plan_id: {plan_id:?} is not a plan; plans are {known}")))?;
    let (success_url, cancel_url) = (return_url(fields, "success_url")?, return_url(fields, "cancel_url")?);
    Ok(UpgradeRequest { plan, success_url, cancel_url })
}

/// A `success_url` or `cancel_url`: an absolute http(s) URL.
fn return_url(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, CreditError> {
    match fields.get(name) {
        None => Ok(None),
        Some(Value::String(text)) => {
            let parsed = url::Url::parse(text).ok().filter(|url| matches!(url.scheme(), "http" | "https"));
            match parsed {
                Some(_) if text.len() <= MAX_URL_BYTES => Ok(Some(text.clone())),
                _ => Err(CreditError::Invalid(format!(
                    "{name} must be an absolute http or https URL of at most {MAX_URL_BYTES} bytes"
                ))),
            }
        }
        Some(_) => Err(CreditError::Invalid(format!("{name} must be a string"))),
    }
}

// ---- Request bodies ------------------------------------------------------------------
// The documented form of the bodies read above: the OpenAPI schemas of this context's
// requests (the parser is the authority; the fuzzer checks that the two agree).

pub mod requests {
    use serde::Serialize;
    use serde_json::Value;
    use utoipa::ToSchema;

    /// `POST /plan/upgrade`
    #[derive(Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct UpgradePlan {
        /// `free`, `creator`, `creator_annual`, `professional` or `professional_annual`.
        #[schema(max_length = 100)]
        pub plan_id: String,
        /// Where the checkout sends the caller once paid (http or https).
        #[serde(default)]
        #[schema(format = "uri", max_length = 2048, nullable = false)]
        pub success_url: Option<String>,
        /// Where the checkout sends the caller when it is canceled.
        #[serde(default)]
        #[schema(format = "uri", max_length = 2048, nullable = false)]
        pub cancel_url: Option<String>,
    }

    /// Auto top-up settings to change; those left out keep their value.
    #[derive(Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct AutoTopUpChange {
        #[serde(default)]
        #[schema(nullable = false)]
        pub enabled: Option<bool>,
        #[serde(default)]
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        pub threshold: Option<u64>,
        #[serde(default)]
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        pub quantity: Option<u64>,
        /// At least `quantity` (default 5,000).
        #[serde(default)]
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        pub monthly_limit: Option<u64>,
        #[serde(default)]
        #[schema(nullable = false)]
        pub cover_shortfall: Option<bool>,
    }

    /// `POST /credits/settings` (creator, creator_annual, professional and
    /// professional_annual plans only).
    #[derive(Serialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct CreditSettings {
        pub auto_topup: AutoTopUpChange,
    }

    /// A Stripe event as Stripe sends it (`checkout.session.completed` and `invoice.paid`
    /// are applied; others are received and ignored).
    #[derive(Serialize)]
    pub struct StripeEvent(Value);

    impl utoipa::PartialSchema for StripeEvent {
        fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
            use utoipa::openapi::schema::{ObjectBuilder, Type};
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some("A Stripe event, verified by its `Stripe-Signature` header"))
                .into()
        }
    }

    impl ToSchema for StripeEvent {}
}
