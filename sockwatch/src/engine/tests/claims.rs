//! Verdicts held on a claim about the host: given out in their order once answered, withheld
//! when the answer denies the claim, standing when nobody answers.
use super::*;
use crate::engine::{Claim, Fact};

const F1: u64 = 10;

/// A's listener at P.
fn a_listens(e: &mut Engine) {
    quiet(
        e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
        ],
    );
}

/// B's foreign unlink of A's listener: a foreign unlink and A's orphan, both claiming A still
/// holds socket 11.
fn b_unlinks() -> Input {
    unlink_exact(2000, &b(), P, fid(F1), live(a().tgid, 11, false))
}

fn foreign_unlink(e: &mut Engine) -> Vec<Verdict> {
    a_listens(e);
    e.apply(&b_unlinks())
}

fn a_holds_11(holds: bool) -> Input {
    Input::Fact(Fact {
        claim: Claim::SocketOpen {
            tgid: a().tgid,
            sock_ino: 11,
        },
        holds,
        ts_ns: 2000,
    })
}

#[test]
fn a_claim_holds_its_verdicts_until_answered_and_keeps_their_order() {
    let plain = foreign_unlink(&mut engine());
    let names: Vec<_> = plain.iter().map(Verdict::name).collect();
    assert_eq!(names, ["foreign_unlink", "orphan_opened"]);

    let mut e = engine().holding_claims();
    assert_eq!(foreign_unlink(&mut e), vec![], "held");
    assert_eq!(
        e.open_claims(),
        vec![(
            2000,
            Claim::SocketOpen {
                tgid: a().tgid,
                sock_ino: 11
            }
        )],
        "one claim, asked once for both verdicts"
    );
    assert_eq!(e.apply(&a_holds_11(true)), plain);
    assert_eq!(e.open_claims(), vec![]);
    assert_eq!(e.take_withheld(), vec![]);
}

#[test]
fn a_denied_claim_withholds_its_verdicts() {
    let plain = foreign_unlink(&mut engine());
    let mut e = engine().holding_claims();
    foreign_unlink(&mut e);
    assert_eq!(e.apply(&a_holds_11(false)), vec![]);
    assert_eq!(e.take_withheld(), plain);
    assert_eq!(e.take_withheld(), vec![], "taken once");
}

#[test]
fn an_unanswered_claim_stands_when_settled() {
    let plain = foreign_unlink(&mut engine());
    let mut e = engine().holding_claims();
    foreign_unlink(&mut e);
    let mut out = Vec::new();
    e.settle_into(&mut out);
    assert_eq!(out, plain);
}

#[test]
fn a_fact_before_its_verdict_answers_the_next_input_only() {
    let mut e = engine().holding_claims();
    a_listens(&mut e);
    assert_eq!(e.apply(&a_holds_11(false)), vec![], "nothing held yet");
    assert_eq!(e.apply(&b_unlinks()), vec![]);
    assert_eq!(e.open_claims(), vec![], "answered by the early fact");
    assert_eq!(e.take_withheld().len(), 2);

    // An early fact followed by an input whose verdicts do not claim it is forgotten.
    let mut e = engine().holding_claims();
    a_listens(&mut e);
    e.apply(&a_holds_11(false));
    quiet(
        &mut e,
        &[bind(1500, &c(), fid(F1 + 1), 12, "/run/other.sock")],
    );
    e.apply(&b_unlinks());
    assert_eq!(e.open_claims().len(), 1, "the fact was forgotten");
}

#[test]
fn a_stale_socket_file_claims_its_file_is_still_there() {
    let mut e = engine().holding_claims();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            release(2000, &a(), fid(F1), 11),
        ],
    );
    assert_eq!(e.apply(&exit(2001, a().tgid)), vec![]);
    let claim = Claim::FileOnDisk {
        path: P.into(),
        file: fid(F1),
    };
    assert_eq!(e.open_claims(), vec![(2001, claim.clone())]);
    let gone = Input::Fact(Fact {
        claim,
        holds: false,
        ts_ns: 2001,
    });
    assert_eq!(e.apply(&gone), vec![]);
    let withheld: Vec<_> = e.take_withheld().iter().map(Verdict::name).collect();
    assert_eq!(withheld, ["stale_socket_file"]);
}

#[test]
fn an_engine_not_holding_claims_gives_every_verdict_at_once_and_ignores_facts() {
    let mut e = engine();
    assert_eq!(foreign_unlink(&mut e).len(), 2);
    assert_eq!(e.apply(&a_holds_11(false)), vec![]);
    assert_eq!(e.take_withheld(), vec![]);
}

#[test]
fn a_fact_is_written_as_a_check_line_and_read_back_as_an_input() {
    let Input::Fact(fact) = a_holds_11(false) else {
        unreachable!()
    };
    let line = serde_json::to_string(&fact).expect("serializes");
    assert_eq!(
        line,
        r#"{"check":"socket_open","tgid":100,"sock_ino":11,"holds":false,"ts_ns":2000}"#
    );
    assert_eq!(serde_json::from_str::<Fact>(&line).expect("parses"), fact);
    let input = serde_json::to_string(&Input::Fact(fact.clone())).expect("serializes");
    assert_eq!(
        serde_json::from_str::<Input>(&input).expect("parses"),
        Input::Fact(fact)
    );
}
