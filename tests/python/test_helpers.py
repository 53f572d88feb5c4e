"""The test helpers themselves (conftest.py): LineReader, which every test that waits for a
child's output line relies on."""
import subprocess
import sys

from conftest import LineReader


def child(code):
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_lines_written_together_are_all_seen():
    """Two lines in one write, then silence: a select() on the pipe followed by a buffered
    readline() returns the first and then waits for bytes that never come."""
    p = child("import sys, time; sys.stdout.write('one\\ntwo\\n'); sys.stdout.flush(); "
              "time.sleep(60)")
    try:
        r = LineReader(p.stdout)
        assert r.readline(10) == "one\n"
        assert r.readline(1) == "two\n"
        assert r.readline(0.2) is None  # nothing more yet: a timeout, not the end
    finally:
        p.kill()
        p.wait()


def test_end_of_file_and_a_last_line_without_newline():
    p = child("import sys; sys.stdout.write('a\\nlast')")
    r = LineReader(p.stdout)
    assert r.readline(10) == "a\n"
    assert r.readline(10) == "last"
    assert r.readline(10) == ""
    assert r.readline(10) == ""  # and stays at the end
    p.wait()


def test_wait_for_then_rest():
    p = child("print('x'); print('ready port=7'); print('y'); print('z')")
    r = LineReader(p.stdout)
    assert r.wait_for(lambda ln: ln.startswith("ready"), 10) == "ready port=7\n"
    assert r.rest() == "y\nz\n"
    assert r.wait_for(lambda ln: True, 1) == ""  # the end, not a timeout
    p.wait()
