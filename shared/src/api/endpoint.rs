//! How a context declares its endpoints: each once, in its api module, with everything
//! the service derives from it. An endpoint names its Lambda function (and binary), its
//! method and path, the actions its IAM policy grants (DynamoDB; S3 on the media bucket;
//! SQS on the queues it sends to), whether it may answer more than a Lambda response
//! holds and whether it honours `Idempotency-Key`, its handler, and its OpenAPI
//! operation. From the declarations come the routes table ([`super::routes::ROUTES`]:
//! the local router, `template.yaml`'s and IAM's checks), the handler table (a binary
//! names its own handler, `api::handlers::<name>`, so that it links that one alone) and
//! the OpenAPI document (only `get-openapi` and `serve` link the operations).

/// Declares a context's endpoints (see the module's notes). It makes the context's
/// `ROUTES`, a module `endpoints` with one handler per endpoint, `handler_of` (the
/// handler of a function name) and `operation` (its OpenAPI operation).
macro_rules! endpoints {
    ($(
        $name:ident: $method:ident $path:literal => $function:literal, handler: $handler:ident,
        dynamodb: [$($action:literal),* $(,)?]
        $(, s3: [$($s3:literal),* $(,)?])?
        $(, sqs: [$($sqs:literal),* $(,)?] on [$($queue:literal),* $(,)?])?
        $(, large_responses: $large:literal)?
        $(, idempotent: $idempotent:literal)?,
        operation($sc:ident): $operation:expr;
    )*) => {
        /// This context's endpoints, in the routes table's order.
        pub static ROUTES: &[$crate::api::routes::Route] = &[$(
            $crate::api::routes::Route {
                method: http::Method::$method,
                path: $path,
                function: $function,
                dynamodb_actions: &[$($action),*],
                s3_actions: &[$($($s3),*)?],
                large_responses: false $(|| $large)?,
                sqs_actions: &[$($($sqs),*)?],
                queues: &[$($($queue),*)?],
                idempotent: false $(|| $idempotent)?,
            },
        )*];

        /// One handler per endpoint, by the name its Lambda binary calls it.
        pub mod endpoints {
            $(
                #[doc = concat!("The handler of `", $function, "`.")]
                pub fn $name(
                    app: std::sync::Arc<$crate::app::App>,
                    call: $crate::api::Call,
                ) -> $crate::api::HandlerFuture {
                    Box::pin(async move { $crate::api::respond(super::$handler(app, call).await) })
                }
            )*
        }

        /// The handler of the endpoint served by `function`, when it is one of these.
        pub fn handler_of(function: &str) -> Option<$crate::api::Handler> {
            match function {
                $($function => Some(endpoints::$name),)*
                _ => None,
            }
        }

        /// The OpenAPI operation of the endpoint served by `function`, when it is one of
        /// these; its schemas are registered in `schemas`.
        pub(crate) fn operation(
            function: &str,
            schemas: &mut $crate::api::openapi::Schemas,
        ) -> Option<$crate::api::openapi::Doc> {
            match function {
                $($function => {
                    let $sc = &mut *schemas;
                    Some($operation)
                })*
                _ => None,
            }
        }
    };
}
