//! The README's five-minute tour, run as a reader would: the block after `<!-- tour -->`
//! with bash, against a fresh `serve`, with `API` and `KEY` set as the tour says. Every
//! command must succeed, and what it prints must show the run through.

use std::path::Path;
use std::process::Command;

use crate::crashes::{ServeProcess, KEY};

/// The shell block that follows the `<!-- tour -->` marker in the README.
fn tour_block(readme: &str) -> &str {
    let start = readme.find("<!-- tour -->\n```sh\n").expect("the README marks its tour with <!-- tour -->");
    let block = &readme[start + "<!-- tour -->\n```sh\n".len()..];
    &block[..block.find("\n```").expect("the tour's block ends")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_uploads_a_video_runs_an_agent_and_gets_its_output() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let tour = tour_block(&readme);
    let data = tempfile::tempdir().unwrap();
    let serve = ServeProcess::start(data.path(), &[]).await;
    let folder = tempfile::tempdir().unwrap();
    let output = tokio::task::spawn_blocking({
        let (tour, folder, api) = (tour.to_owned(), folder.path().to_owned(), format!("http://{}", serve.addr));
        move || {
            Command::new("bash")
                .args(["-e", "-u", "-o", "pipefail", "-c", &tour])
                .current_dir(folder)
                .env("API", api)
                .env("KEY", KEY)
                .output()
                .expect("bash runs")
        }
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the tour failed ({}):\n{printed}\n{errors}", output.status);
    assert!(printed.contains("\"status\": \"ready\""), "the upload was finalized:\n{printed}");
    assert!(printed.contains("\"operations_applied\": 5"), "the agent was built:\n{printed}");
    assert!(printed.lines().any(|line| line == "completed"), "the run completed:\n{printed}");
    assert!(printed.contains("\"video_url\": \"http"), "the output has a link:\n{printed}");
    let seconds: f64 = printed.lines().last().and_then(|line| line.trim().parse().ok()).expect("ffprobe's duration");
    assert!((2.3..=2.7).contains(&seconds), "twice as fast as the 5 s video: {seconds} s\n{printed}");
    drop(serve);
}

/// The README's Deploying section says what every parameter of the template sets.
#[test]
fn the_readme_names_every_parameter_of_the_template() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let deploying = readme.split("## Deploying").nth(1).expect("a Deploying section").split("\n## ").next().unwrap();
    let template: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("template.yaml")).unwrap()).unwrap();
    let parameters = template["Parameters"].as_mapping().expect("the template's parameters");
    assert!(parameters.len() >= 10, "{parameters:?}");
    for name in parameters.keys().map(|name| name.as_str().unwrap()) {
        assert!(deploying.contains(&format!("`{name}`")), "the README's Deploying section names {name}");
    }
}

#[test]
fn the_readme_stays_short_and_links_every_guide_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 250,
        "the README has {} lines: move reference to docs/guide/",
        readme.lines().count()
    );
    for page in std::fs::read_dir(root.join("docs/guide")).unwrap() {
        let name = page.unwrap().file_name().to_string_lossy().into_owned();
        assert!(readme.contains(&format!("(docs/guide/{name})")), "the README links docs/guide/{name}");
    }
}
