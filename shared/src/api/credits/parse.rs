//! Parsing the bodies of the plan and credit endpoints at the edge, into the domain's
//! typed requests: every refusal names the field.

use serde_json::{Map, Value};

use crate::domain::credits::plans::PlanId;
use crate::domain::credits::service::{CreditError, SettingsChange, UpgradeRequest, MAX_URL_BYTES};
use crate::domain::credits::MAX_TOP_UP_SETTING;

/// A property outside a body's declaration is a 400 `{ detail }`.
impl crate::core::json::Refusal for CreditError {
    fn unknown_property(message: String) -> Self {
        CreditError::Invalid(message)
    }
}

/// The body as an object: a refusal names it `the body`, as the one of `auto_topup` names
/// that part.
const THE_BODY: &str = "the body";

/// The body as an object (`the body must be a JSON object` otherwise).
fn the_body(body: &Value) -> Result<&Map<String, Value>, CreditError> {
    body.as_object().ok_or_else(|| CreditError::Invalid(format!("{THE_BODY} must be a JSON object")))
}

crate::closed_body! {
    /// Auto top-up settings to change; those left out keep their value.
    #[schema(as = AutoTopUpChange)]
    pub struct AutoTopUpBody -> CreditError {
        #[schema(nullable = false)]
        enabled: Option<bool> = |value| flag(value, "enabled"),
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        threshold: Option<u64> = |value| number(value, "threshold"),
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        quantity: Option<u64> = |value| number(value, "quantity"),
        /// At least `quantity` (default 5,000).
        #[schema(minimum = 0, maximum = 1000000, nullable = false)]
        monthly_limit: Option<u64> = |value| number(value, "monthly_limit"),
        #[schema(nullable = false)]
        cover_shortfall: Option<bool> = |value| flag(value, "cover_shortfall"),
    }
}

crate::closed_body! {
    /// `POST /credits/settings` (creator, creator_annual, professional and
    /// professional_annual plans only).
    #[schema(as = CreditSettings)]
    pub struct SettingsBody -> CreditError {
        auto_topup: AutoTopUpBody = |value: Option<&Value>| {
            let given = value.ok_or_else(|| CreditError::Invalid("auto_topup is required".into()))?;
            let Value::Object(fields) = given else {
                return Err(CreditError::Invalid("auto_topup must be a JSON object".into()));
            };
            AutoTopUpBody::parse_at("auto_topup", fields)
        },
    }
}

fn flag(value: Option<&Value>, name: &str) -> Result<Option<bool>, CreditError> {
    match value {
        None => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(CreditError::Invalid(format!("auto_topup.{name} must be true or false"))),
    }
}

fn number(value: Option<&Value>, name: &str) -> Result<Option<u64>, CreditError> {
    match value {
        None => Ok(None),
        Some(value) => match value.as_u64().filter(|number| *number <= MAX_TOP_UP_SETTING) {
            Some(number) => Ok(Some(number)),
            None => Err(CreditError::Invalid(format!(
                "auto_topup.{name} must be a whole number from 0 to {MAX_TOP_UP_SETTING}, not {value}"
            ))),
        },
    }
}

/// `POST /credits/settings {auto_topup: {enabled, threshold, quantity, monthly_limit,
/// cover_shortfall}}`: each number a whole 0–1,000,000; fields left out keep their value.
pub fn settings_change(body: &Value) -> Result<SettingsChange, CreditError> {
    let SettingsBody { auto_topup } = SettingsBody::parse_at(THE_BODY, the_body(body)?)?;
    let AutoTopUpBody { enabled, threshold, quantity, monthly_limit, cover_shortfall } = auto_topup;
    Ok(SettingsChange { enabled, threshold, quantity, monthly_limit, cover_shortfall })
}

crate::closed_body! {
    /// `POST /plan/upgrade`
    #[schema(as = UpgradePlan)]
    pub struct UpgradeBody -> CreditError {
        /// `free`, `creator`, `creator_annual`, `professional` or `professional_annual`.
        #[schema(value_type = String, max_length = 100)]
        plan_id: PlanId = |value: Option<&Value>| {
            let plan_id = match value {
                Some(Value::String(text)) => text,
                Some(_) => return Err(CreditError::Invalid("plan_id must be a string".into())),
                None => return Err(CreditError::Invalid("plan_id is required".into())),
            };
            let known = PlanId::ALL.map(PlanId::as_str).join(", ");
            PlanId::parse(plan_id)
                .ok_or_else(|| CreditError::Invalid(format!("plan_id: {plan_id:?} is not a plan; plans are {known}")))
        },
        /// Where the checkout sends the caller once paid (http or https).
        #[schema(format = "uri", max_length = 2048, nullable = false)]
        success_url: Option<String> = |value| return_url(value, "success_url"),
        /// Where the checkout sends the caller when it is canceled.
        #[schema(format = "uri", max_length = 2048, nullable = false)]
        cancel_url: Option<String> = |value| return_url(value, "cancel_url"),
    }
}

/// `POST /plan/upgrade {plan_id, success_url?, cancel_url?}`.
pub fn upgrade_request(body: &Value) -> Result<UpgradeRequest, CreditError> {
    let UpgradeBody { plan_id, success_url, cancel_url } = UpgradeBody::parse_at(THE_BODY, the_body(body)?)?;
    Ok(UpgradeRequest { plan: plan_id, success_url, cancel_url })
}

/// A `success_url` or `cancel_url`: an absolute http(s) URL.
fn return_url(value: Option<&Value>, name: &str) -> Result<Option<String>, CreditError> {
    match value {
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

// ---- The Stripe webhook ---------------------------------------------------------
// Its body is Stripe's, read as bytes so that its signature can be checked.

/// A Stripe event as Stripe sends it (`checkout.session.completed` and `invoice.paid`
/// are applied; others are received and ignored).
pub struct StripeEvent;

impl utoipa::PartialSchema for StripeEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("A Stripe event, verified by its `Stripe-Signature` header"))
            .into()
    }
}

impl utoipa::ToSchema for StripeEvent {}
