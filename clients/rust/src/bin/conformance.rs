use jobqueue_client::*;
use serde_json::json;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let c = Client::new(&a[1], &a[2]);
    let r = c.enqueue("conformance.echo", json!({"x": 1}), &EnqueueOptions { priority: Some(3), delay: Some("1m".into()), ..Default::default() }).unwrap();
    println!("{:?}\n{:?}", r, c.get_job(&r.jid).unwrap());
    println!("{:?}", c.enqueue("conformance.echo", json!(null), &EnqueueOptions { priority: Some(0), ..Default::default() }));
    println!("{:?}", c.get_job("nosuch").unwrap_err().kind());
    println!("{}", Client::new("http://127.0.0.1:1", "x").get_job("x").unwrap_err());
    println!("{:?}", c.ids().add("conformance", "r/b c", &IdValue { value: Some(json!(5)), job_type: Some("conformance.echo".into()), delay: Some(60.0.into()), ..Default::default() }));
    println!("{:?}", c.ids().get("conformance", "r/b c"));
    println!("{:?}", c.ids().list("conformance", &ListOptions { prefix: Some("r/".into()), ..Default::default() }).map(|p| p.jobs.len()));
    println!("{:?}", c.enqueue_batch(&[JobSpec::new("conformance.echo", json!(1)), JobSpec::new("conformance.echo", json!(2))]));
    let mut o = WorkerOptions::new(&["conformance"]); o.concurrency = 4;
    let w = Worker::new(c.clone(), o).handle("conformance.echo", |p, _| Ok(json!({"lang": "rust", "payload": p})));
    let s = w.stopper();
    std::thread::spawn(move || { std::thread::sleep(std::time::Duration::from_secs(3)); s.stop(); });
    println!("{:?}", w.run());
}
