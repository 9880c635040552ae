//! The console (`console/`, built into `console/dist` and committed): its three files
//! embedded in the binary and answered under `/console` by `serve` and by the `console`
//! function, with no API key (the console asks for one and calls the public API with it).
//! It is no endpoint of the API: not in the routes table nor the OpenAPI document.

use std::sync::LazyLock;

use http::{header, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};

use super::{ApiError, Body, Response};

/// Where the console lives, on the API's own origin.
pub const PREFIX: &str = "/console";

/// One embedded file, and its gzip copy (made by `console/scripts/compress.mjs`).
pub struct File {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
    pub gzip: &'static [u8],
}

/// The bundle, as `npm run build` in `console/` makes it (fixed names, no hashes).
pub const FILES: [File; 3] = [
    File {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../../console/dist/index.html"),
        gzip: include_bytes!("../../../console/dist/index.html.gz"),
    },
    File {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../../console/dist/console.js"),
        gzip: include_bytes!("../../../console/dist/console.js.gz"),
    },
    File {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../../console/dist/console.css"),
        gzip: include_bytes!("../../../console/dist/console.css.gz"),
    },
];

/// Each file's entity tag: a revalidation costs a 304, and a new deployment is seen at
/// once. The gzip copy's tag ends in `-gz`: other bytes, another tag.
static TAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| FILES.iter().map(|file| hex::encode(&Sha256::digest(file.body.as_bytes())[..12])).collect());

/// Whether the request's `Accept-Encoding` takes gzip: named with a weight above 0, or
/// not named and `*` above 0.
fn takes_gzip(accept_encoding: Option<&HeaderValue>) -> bool {
    let Some(value) = accept_encoding.and_then(|value| value.to_str().ok()) else { return false };
    let weight = |wanted: &str| {
        value.split(',').find_map(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            if !parts.next().unwrap_or_default().eq_ignore_ascii_case(wanted) {
                return None;
            }
            let q = parts.find_map(|parameter| {
                let (name, q) = parameter.split_once('=')?;
                name.trim().eq_ignore_ascii_case("q").then(|| q.trim().parse::<f32>().unwrap_or(0.0))
            });
            Some(q.unwrap_or(1.0))
        })
    };
    weight("gzip").or_else(|| weight("*")).is_some_and(|q| q > 0.0)
}

/// The request headers the answer depends on.
#[derive(Clone, Copy, Default)]
pub struct Asked<'a> {
    pub if_none_match: Option<&'a HeaderValue>,
    pub accept_encoding: Option<&'a HeaderValue>,
}

impl<'a> Asked<'a> {
    pub fn of(headers: &'a http::HeaderMap) -> Self {
        Self {
            if_none_match: headers.get(header::IF_NONE_MATCH),
            accept_encoding: headers.get(header::ACCEPT_ENCODING),
        }
    }
}

/// What the console's pages may load: its own files and the API (same origin), media
/// and uploads at the storage's signed links (S3 on AWS), and React Flow's inline styles.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data: blob: https: http:; media-src 'self' blob: https: http:; connect-src 'self' https: http:; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The console's part of a path `serve` received (after `/console`), when the path is
/// the console's.
pub fn path_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(PREFIX)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// The console's part of a path the `console` function received: API Gateway routes
/// only the console's paths to it, with a stage prefix or not.
pub fn path_in_function(path: &str) -> &str {
    match path.find(PREFIX) {
        Some(at) => path_of(&path[at..]).unwrap_or("/"),
        None => "/",
    }
}

/// The answer to a request for the console's path `rest` (what [`path_of`] or
/// [`path_in_function`] gave): the file, gzipped when the browser takes it.
pub fn answer(method: &Method, rest: &str, asked: Asked<'_>) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::method_not_allowed(&[&Method::GET, &Method::HEAD], "Method Not Allowed");
    }
    // `/console` and `/console/` are the page (its links are absolute, its views are
    // in the URL's fragment).
    let name = match rest.trim_start_matches('/') {
        "" => "index.html",
        name => name,
    };
    let Some(at) = FILES.iter().position(|file| file.name == name) else {
        return ApiError::detail(StatusCode::NOT_FOUND, "Not Found").into_response();
    };
    let file = &FILES[at];
    let gzip = takes_gzip(asked.accept_encoding);
    let tag = if gzip { format!("\"{}-gz\"", TAGS[at]) } else { format!("\"{}\"", TAGS[at]) };
    let fresh = asked
        .if_none_match
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|candidate| candidate.trim().trim_start_matches("W/") == tag));
    let length = if gzip { file.gzip.len() } else { file.body.len() };
    let (status, body) = match (fresh, method == Method::HEAD, gzip) {
        (true, _, _) => (StatusCode::NOT_MODIFIED, Body::Empty),
        (false, true, _) => (StatusCode::OK, Body::Empty),
        (false, false, true) => (StatusCode::OK, Body::Binary(file.gzip.to_vec())),
        (false, false, false) => (StatusCode::OK, Body::Text(file.body.to_owned())),
    };
    let mut builder = http::Response::builder()
        .status(status)
        .header(header::ETAG, tag.as_str())
        .header(header::VARY, "Accept-Encoding")
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer");
    if status == StatusCode::OK {
        builder = builder.header(header::CONTENT_TYPE, file.content_type);
        if gzip {
            builder = builder.header(header::CONTENT_ENCODING, "gzip");
        }
        if method == Method::HEAD {
            builder = builder.header(header::CONTENT_LENGTH, length);
        }
    }
    if file.name == "index.html" {
        builder = builder.header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY);
    }
    builder.body(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(response: &Response) -> String {
        String::from_utf8_lossy(response.body().as_ref()).into_owned()
    }

    #[test]
    fn the_console_paths_are_its_own_and_a_stage_prefix_is_allowed_in_the_function() {
        assert_eq!(path_of("/console"), Some(""));
        assert_eq!(path_of("/console/"), Some("/"));
        assert_eq!(path_of("/console/console.js"), Some("/console.js"));
        assert_eq!(path_of("/consoles"), None);
        assert_eq!(path_of("/agents"), None);
        // An entry called "console" is the API's, not the console's.
        assert_eq!(path_of("/shared-stores/x/entries/console"), None);
        assert_eq!(path_in_function("/console/console.css"), "/console.css");
        assert_eq!(path_in_function("/prod/console/console.css"), "/console.css");
        assert_eq!(path_in_function("/prod/console"), "");
    }

    fn asking(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        pairs.iter().map(|(name, value)| (http::HeaderName::from_static(name), value.parse().unwrap())).collect()
    }

    #[test]
    fn the_index_the_script_and_the_style_are_answered_with_their_types_and_tags() {
        let plain = http::HeaderMap::new();
        let index = answer(&Method::GET, "/", Asked::of(&plain));
        assert_eq!(index.status(), StatusCode::OK);
        assert_eq!(index.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(text(&index).contains("/console/console.js"), "the index loads the script: {}", text(&index));
        assert!(index.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        let script = answer(&Method::GET, "/console.js", Asked::of(&plain));
        assert_eq!(script.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        assert_eq!(text(&script), FILES[1].body);
        assert!(!script.headers().contains_key(header::CONTENT_ENCODING));
        let style = answer(&Method::GET, "/console.css", Asked::of(&plain));
        assert_eq!(style.headers()[header::CONTENT_TYPE], "text/css; charset=utf-8");
        // The same tag again: a 304 without a body.
        let tag = script.headers()[header::ETAG].to_str().unwrap().to_owned();
        let again = answer(&Method::GET, "/console.js", Asked::of(&asking(&[("if-none-match", &tag)])));
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(again.body().is_empty());
        let head = answer(&Method::HEAD, "/console.js", Asked::of(&plain));
        assert_eq!((head.status(), head.body().is_empty()), (StatusCode::OK, true));
        assert_eq!(head.headers()[header::CONTENT_LENGTH], FILES[1].body.len().to_string());
    }

    #[test]
    fn a_browser_that_takes_gzip_gets_the_gzip_copy_under_a_tag_of_its_own() {
        let gzip = asking(&[("accept-encoding", "gzip, deflate, br")]);
        let script = answer(&Method::GET, "/console.js", Asked::of(&gzip));
        assert_eq!(script.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(script.headers()[header::VARY], "Accept-Encoding");
        assert_eq!(script.body().as_ref(), FILES[1].gzip);
        assert_eq!(&FILES[1].gzip[..2], &[0x1f, 0x8b], "gzip's magic");
        assert!(FILES[1].gzip.len() * 2 < FILES[1].body.len(), "smaller");
        let tag = script.headers()[header::ETAG].to_str().unwrap().to_owned();
        assert!(tag.ends_with("-gz\""), "{tag}");
        let plain = answer(&Method::GET, "/console.js", Asked::of(&asking(&[("if-none-match", &tag)])));
        assert_eq!(plain.status(), StatusCode::OK, "the gzip copy's tag is not the plain file's");
        for (refusing, takes) in [
            ("gzip;q=0, identity", false),
            ("gzip; Q=0, *", false),
            ("identity", false),
            ("*", true),
            ("GZIP;q=0.5", true),
        ] {
            let script = answer(&Method::GET, "/console.js", Asked::of(&asking(&[("accept-encoding", refusing)])));
            assert_eq!(script.headers().contains_key(header::CONTENT_ENCODING), takes, "{refusing}");
        }
        assert_eq!(FILES[1].gzip[9], 0xff, "no system in the header");
        for file in &FILES {
            assert!(!file.gzip.is_empty(), "{} has its gzip copy", file.name);
        }
    }

    #[test]
    fn the_bare_prefix_is_the_page_and_others_are_refused_with_the_apis_bodies() {
        let plain = http::HeaderMap::new();
        for path in ["", "/", "/index.html"] {
            let page = answer(&Method::GET, path, Asked::of(&plain));
            assert_eq!((page.status(), text(&page)), (StatusCode::OK, FILES[0].body.to_owned()), "{path:?}");
        }
        let missing = answer(&Method::GET, "/nothing.js", Asked::of(&plain));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert_eq!(text(&missing), r#"{"detail":"Not Found"}"#);
        let posted = answer(&Method::POST, "/", Asked::of(&plain));
        assert_eq!(posted.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(posted.headers()[header::ALLOW], "GET, HEAD");
    }
}
