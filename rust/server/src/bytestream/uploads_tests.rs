//! `uploads`' unit tests: takeover, the caps, expiry (with made-up clocks).

use super::*;

fn uploads(sessions: usize, per_client: usize) -> Uploads {
    let limits = Limits {
        sessions,
        per_client,
        idle: Duration::from_secs(100),
        tight_idle: Duration::from_secs(10),
        tight_bytes: 1000,
    };
    Uploads::with(limits, DecoderBudget::new(1 << 20, Duration::ZERO))
}

#[test]
fn a_second_write_takes_the_session_over() {
    let u = uploads(8, 8);
    let a = u.attach("n", "c".into()).unwrap();
    let b = u.attach("n", "c".into()).unwrap();
    assert!(a.superseded() && !b.superseded());
    assert!(Arc::ptr_eq(&a.session, &b.session));
    drop(a); // the old stream's end does not detach the new one
    assert_eq!(u.gauge().streams, 1);
    drop(b);
    assert_eq!((u.gauge().sessions, u.gauge().streams), (1, 0));
}

#[test]
fn caps_push_out_the_oldest_idle_session_or_refuse() {
    let u = uploads(3, 2);
    let t0 = Instant::now();
    let s = |i: u64| t0 + Duration::from_millis(i);
    drop(u.attach_at("a1", "a".into(), s(1)).unwrap());
    drop(u.attach_at("a2", "a".into(), s(2)).unwrap());
    // a's third session pushes out a's oldest idle one.
    let a3 = u.attach_at("a3", "a".into(), s(3)).unwrap();
    assert!(u.get("a1").is_none() && u.get("a2").is_some());
    // b has room of its own, up to the total.
    let b1 = u.attach_at("b1", "b".into(), s(4)).unwrap();
    assert_eq!(u.gauge().sessions, 3);
    // Total full: the oldest idle one goes (a2), whoever's it is.
    let b2 = u.attach_at("b2", "b".into(), s(5)).unwrap();
    assert!(u.get("a2").is_none());
    // Everything in use: refused, nothing lost.
    let e = u.attach_at("c1", "c".into(), s(6)).err().unwrap();
    assert!(matches!(e, Failure::ResourceExhausted(_)), "{e:?}");
    let e = u.attach_at("b3", "b".into(), s(6)).err().unwrap();
    assert!(e.message().contains("b has 2 uploads"), "{e:?}");
    assert_eq!(u.gauge().sessions, 3);
    drop((a3, b1, b2));
}

#[test]
fn idle_sessions_expire_sooner_when_the_table_is_half_full() {
    let u = uploads(4, 4);
    drop(u.attach("x", "c".into()).unwrap());
    let let_go = u.table.map.lock().unwrap()["x"].since;
    let at = |s: u64| let_go + Duration::from_secs(s);
    // 1 session of 4: not tight; 11 s idle is within the normal limit.
    let _y = u.attach_at("y", "c".into(), at(11)).unwrap();
    assert!(u.get("x").is_some());
    // 2 of 4: tight, and x is past the short limit.
    let _z = u.attach_at("z", "c".into(), at(11)).unwrap();
    assert!(u.get("x").is_none());
    // A session with a stream attached never expires.
    let _v = u.attach_at("v", "c".into(), at(1000)).unwrap();
    assert!(u.get("y").is_some() && u.get("z").is_some());
}

#[test]
fn idle_temp_files_past_the_bound_make_the_table_tight() {
    let u = uploads(100, 100);
    let a = u.attach("big", "c".into()).unwrap();
    a.holds(600);
    drop(a);
    let let_go = u.table.map.lock().unwrap()["big"].since;
    let at = |s: u64| let_go + Duration::from_secs(s);
    drop(u.attach_at("small", "c".into(), at(0)).unwrap());
    // 600 bytes idle: under the bound of 1000, so 11 s is within the normal limit.
    drop(u.attach_at("x", "c".into(), at(11)).unwrap());
    assert!(u.get("big").is_some());
    let b = u.attach_at("big", "c".into(), at(11)).unwrap();
    b.holds(1000);
    drop(b); // let go again: its idle clock starts now
    let let_go = u.table.map.lock().unwrap()["big"].since;
    drop(
        u.attach_at("y", "c".into(), let_go + Duration::from_secs(11))
            .unwrap(),
    );
    assert!(u.get("big").is_none(), "1000 bytes idle: the short limit");
}
