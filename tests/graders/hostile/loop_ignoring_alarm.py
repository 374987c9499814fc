# Attack: hang inside the function after disabling the harness's own timer (SIGALRM ignored),
# so only the grader's watchdog outside the sandbox can stop it.
import signal


def time_per_token(n_params, bytes_per_param, bandwidth):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 0)
    while True:
        pass
