//! keel's openraft runtime: tokio, with the randomness (election jitter) drawn from a generator
//! that can be seeded. A member seeds it from the OS; the simulation seeds it from the history's
//! seed ([`seed`]), so elections replay exactly. Every other call goes to openraft's tokio runtime.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant, TokioRuntime};
use rand08::rngs::StdRng;
use rand08::{RngCore, SeedableRng};

thread_local! {
    static SOURCE: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Seeds this thread's source of randomness (the simulation runs every member on one thread).
pub fn seed(seed: u64) {
    SOURCE.with(|s| *s.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// A random number from this thread's source (seeded from the OS unless [`seed`] was called).
pub fn random_u64() -> u64 {
    SOURCE.with(|s| s.borrow_mut().get_or_insert_with(StdRng::from_entropy).next_u64())
}

/// openraft's tokio runtime, but with a seedable generator.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct KeelRuntime;

impl AsyncRuntime for KeelRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = StdRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        StdRng::seed_from_u64(random_u64())
    }

    fn oneshot<T: OptionalSend>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>) {
        TokioRuntime::oneshot()
    }
}
