//! The path cache's table on a virtual clock: every time is a `Duration`
//! handed in, nothing sleeps.

use std::time::Duration;

use super::*;

const TTL: Duration = Duration::from_millis(100);
const PORT: PortId = PortId {
    node_guid: 0x0002_c903_0000_0001,
    port_num: 1,
};
const OTHER_PORT: PortId = PortId {
    node_guid: 0x0002_c903_0000_0002,
    port_num: 1,
};
const VIEW: PortView = PortView {
    lid: 1,
    sm_lid: 9,
    sm_sl: 0,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[15] = last;
    g
}

/// The key of the query for destination `n` in partition `pkey`.
fn key_in(port: PortId, n: u8, pkey: u16) -> Key {
    Key::of(port, &PathQuery::between(gid(1), gid(n), pkey))
}

fn key(n: u8) -> Key {
    key_in(PORT, n, 0xffff)
}

/// A table of answers `u32` whose flights are `u32` tokens.
fn table(ttl: Duration, max_entries: usize) -> PathTable<u32, u32> {
    PathTable::new(ttl, max_entries)
}

/// Asks for `key` at `now` as the MAD switch does and keeps `value` as its
/// answer at once.
fn kept(t: &mut PathTable<u32, u32>, key: Key, value: u32, now: Duration) {
    let asked_in = t.lookup(&key, VIEW, now, false).unwrap_err();
    t.keep(key, VIEW, value, asked_in, now);
}

#[test]
fn an_answer_is_served_until_its_ttl_and_expires_exactly_at_it() {
    let mut t = table(TTL, 16);
    kept(&mut t, key(4), 40, ms(10));
    assert_eq!(t.lookup(&key(4), VIEW, ms(10), false), Ok(40));
    let last = ms(110) - Duration::from_nanos(1);
    assert_eq!(t.lookup(&key(4), VIEW, last, false), Ok(40));
    assert_eq!(t.counters().expirations, 0);
    assert!(t.lookup(&key(4), VIEW, ms(110), false).is_err());
    assert_eq!(t.counters().expirations, 1);
    assert!(t.is_empty());
    let c = t.counters();
    assert_eq!((c.hits, c.misses), (2, 2));
}

#[test]
fn the_expired_go_first_then_the_oldest_when_the_table_is_full() {
    let mut t = table(TTL, 3);
    kept(&mut t, key(1), 1, ms(0));
    kept(&mut t, key(2), 2, ms(50));
    kept(&mut t, key(3), 3, ms(60));
    // Full, with the oldest expired: it goes as expired, no live one goes.
    kept(&mut t, key(4), 4, ms(120));
    assert_eq!(t.len(), 3);
    assert_eq!((t.counters().expirations, t.counters().evictions), (1, 0));
    assert_eq!(t.lookup(&key(2), VIEW, ms(120), false), Ok(2));
    // Full of live answers: the oldest of them goes to make room.
    kept(&mut t, key(5), 5, ms(130));
    assert_eq!(t.counters().evictions, 1);
    assert!(t.lookup(&key(2), VIEW, ms(130), false).is_err());
    for n in 3..=5 {
        assert_eq!(t.lookup(&key(n), VIEW, ms(130), false), Ok(u32::from(n)));
    }
    assert_eq!(
        t.counters().expirations,
        1,
        "key 2 was evicted, not expired"
    );
}

#[test]
fn past_max_entries_the_oldest_answer_goes_first() {
    let mut t = table(TTL, 2);
    for n in 1..=3 {
        kept(&mut t, key(n), u32::from(n), ms(u64::from(n)));
    }
    assert_eq!(t.len(), 2);
    assert_eq!(t.counters().evictions, 1);
    assert!(t.lookup(&key(1), VIEW, ms(3), false).is_err());
    assert_eq!(t.lookup(&key(2), VIEW, ms(3), false), Ok(2));
}

#[test]
fn an_answer_kept_again_replaces_the_first_and_lives_from_then() {
    let mut t = table(TTL, 2);
    kept(&mut t, key(1), 1, ms(0));
    // The answer of a query asked for while the first was served (a
    // holder's own query, sent anyway).
    let epoch = t.epoch();
    t.keep(key(1), VIEW, 11, epoch, ms(90));
    assert_eq!(t.len(), 1);
    assert_eq!(t.lookup(&key(1), VIEW, ms(150), false), Ok(11));
    assert_eq!(t.counters().evictions, 0);
}

#[test]
fn a_pending_key_is_in_flight_and_its_askers_follow_or_ask_alone() {
    let mut t = table(TTL, 16);
    let epoch = match t.ask(key(4), VIEW, ms(0), true, || 7) {
        Ask::Lead(epoch, &7) => epoch,
        other => panic!("{other:?}"),
    };
    assert!(t.is_in_flight(&key(4)));
    assert!(!t.is_in_flight(&key(5)));
    assert_eq!((t.flight(&key(4)), t.flights()), (Some(&7), 1));
    assert_eq!(t.ask(key(4), VIEW, ms(1), true, || 8), Ask::Follow(&7));
    assert_eq!(t.ask(key(4), VIEW, ms(2), false, || 9), Ask::Alone);
    assert_eq!(t.flight(&key(4)), Some(&7), "no second flight");
    let c = t.counters();
    assert_eq!((c.hits, c.misses, c.coalesced), (0, 2, 1));
    t.keep(key(4), VIEW, 40, epoch, ms(3));
    assert_eq!(t.end_flight(&key(4), |&f| f == 7), Some(7));
    assert!(!t.is_in_flight(&key(4)));
    assert_eq!(t.ask(key(4), VIEW, ms(4), true, || 10), Ask::Hit(40));
    assert_eq!(t.flights(), 0);
}

#[test]
fn a_flight_is_ended_only_by_its_own_leader() {
    let mut t = table(TTL, 16);
    assert!(matches!(
        t.ask(key(4), VIEW, ms(0), true, || 7),
        Ask::Lead(..)
    ));
    assert_eq!(t.end_flight(&key(4), |&f| f == 8), None);
    assert!(t.is_in_flight(&key(4)));
    assert_eq!(t.end_flight(&key(5), |_| true), None);
}

#[test]
fn an_answer_asked_for_before_an_invalidation_is_not_kept() {
    let mut t = table(TTL, 16);
    let Ask::Lead(epoch, _) = t.ask(key(4), VIEW, ms(0), true, || 7) else {
        panic!("a first ask leads");
    };
    t.invalidate_destination(PORT, &gid(4));
    assert_ne!(t.epoch(), epoch);
    t.keep(key(4), VIEW, 40, epoch, ms(1));
    assert!(t.is_empty());
    assert_eq!(t.counters().invalidations, 0, "nothing was there to drop");
    let asked_in = t.lookup(&key(4), VIEW, ms(2), false).unwrap_err();
    t.keep(key(4), VIEW, 41, asked_in, ms(2));
    assert_eq!(t.lookup(&key(4), VIEW, ms(3), false), Ok(41));
}

#[test]
fn a_port_that_looks_different_now_drops_all_of_its_answers() {
    let mut t = table(TTL, 16);
    kept(&mut t, key(4), 4, ms(0));
    kept(&mut t, key(5), 5, ms(0));
    kept(&mut t, key_in(OTHER_PORT, 4, 0xffff), 14, ms(0));
    let before = t.epoch();
    let relid = PortView { lid: 2, ..VIEW };
    assert!(t.lookup(&key(4), relid, ms(1), false).is_err());
    assert_eq!(t.counters().invalidations, 2);
    assert_ne!(t.epoch(), before);
    assert!(t.lookup(&key(5), VIEW, ms(1), false).is_err(), "gone too");
    let other = key_in(OTHER_PORT, 4, 0xffff);
    assert_eq!(t.lookup(&other, VIEW, ms(1), false), Ok(14), "kept");
}

#[test]
fn invalidations_drop_a_destination_or_a_port() {
    let mut t = table(TTL, 16);
    kept(&mut t, key_in(PORT, 4, 0xffff), 1, ms(0));
    kept(&mut t, key_in(PORT, 4, 0x8001), 2, ms(0));
    kept(&mut t, key(5), 3, ms(0));
    kept(&mut t, key_in(OTHER_PORT, 4, 0xffff), 4, ms(0));
    t.invalidate_destination(PORT, &gid(4));
    assert_eq!((t.len(), t.counters().invalidations), (2, 2));
    assert_eq!(t.lookup(&key(5), VIEW, ms(1), false), Ok(3));
    t.invalidate_port(PORT);
    assert_eq!((t.len(), t.counters().invalidations), (1, 3));
    let other = key_in(OTHER_PORT, 4, 0xffff);
    assert_eq!(t.lookup(&other, VIEW, ms(1), false), Ok(4));
}

#[test]
fn with_a_ttl_of_zero_nothing_is_kept_and_every_ask_is_a_miss() {
    let mut t = table(Duration::ZERO, 16);
    assert!(t.is_off());
    for now in 0..3 {
        assert_eq!(t.ask(key(4), VIEW, ms(now), true, || 7), Ask::Alone);
    }
    assert_eq!(t.flights(), 0, "with the cache off nothing is shared");
    kept(&mut t, key(4), 4, ms(3));
    assert!(t.is_empty());
    assert!(t.lookup(&key(4), VIEW, ms(3), true).is_err());
    let c = t.counters();
    assert_eq!((c.hits, c.misses, c.coalesced), (0, 4, 1));
}

#[test]
fn with_no_room_nothing_is_kept() {
    let mut t = table(TTL, 0);
    kept(&mut t, key(4), 4, ms(0));
    assert!(t.is_empty());
    assert_eq!(t.counters().evictions, 0);
}

#[test]
fn the_holders_backoffs_are_counted_with_the_rest() {
    let mut t = table(TTL, 16);
    t.count_busy_backoff();
    t.count_busy_backoff();
    assert_eq!(t.counters().busy_backoffs, 2);
    assert_eq!(
        Counters {
            busy_backoffs: 0,
            ..t.counters()
        },
        Counters::default()
    );
}

#[test]
fn a_key_is_the_port_and_the_query_as_sent() {
    let query = PathQuery::between(gid(1), gid(4), 0xffff);
    let key = Key::of(PORT, &query);
    assert_eq!(
        key,
        Key::of_wire(PORT, query.comp_mask, query.record_bytes())
    );
    assert_eq!((key.port(), key.dgid()), (PORT, gid(4)));
    assert_ne!(key, Key::of(OTHER_PORT, &query));
    let mut sl = query;
    sl.rec.sl = 3;
    assert_ne!(key, Key::of(PORT, &sl), "any byte of the record counts");
}
