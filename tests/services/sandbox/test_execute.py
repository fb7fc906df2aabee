"""Execute through a real gRPC server: arguments in, value out, streamed output, clear errors, both languages."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.support.sandbox import JS, PY, Client

async def test_python_main_gets_named_arguments_and_returns_json(client: Client):
    code = "def main(city: str, days: int, tags=None):\n    return {'plan': [city] * days, 'tags': tags or []}"
    run = await client.run(code, args={"city": "Oslo", "days": 2})
    assert run.value == {"plan": ["Oslo", "Oslo"], "tags": []}
    r = run.result
    assert r.exit_code == 0 and r.isolated and not r.HasField("error")
    assert r.wall_time_ms > 0 and r.cpu_time_ms > 0 and r.peak_memory_bytes > 1 << 20


async def test_python_stdout_and_stderr_are_streamed_separately(client: Client):
    code = "import sys\ndef main():\n    print('to out')\n    print('to err', file=sys.stderr)\n    return None"
    run = await client.run(code)
    assert run.stdout == "to out\n" and run.stderr == "to err\n"
    assert run.result.value_json == "null"


async def test_output_arrives_while_the_program_still_runs(client: Client):
    code = "import time\ndef main():\n    print('first', flush=True)\n    time.sleep(30)\n    return 1"
    call = client.call(code, wall_time_ms=60_000)
    msg = await call.read()
    assert msg.HasField("output") and msg.output.data.startswith(b"first")
    # The call is still open (cancel() is False once a call ended): the line came while the program slept.
    assert call.cancel()


@pytest.mark.parametrize(
    "code",
    [
        "function main(args) { return {sum: args.a + args.b} }",  # plain top-level function
        "module.exports = { main: (args) => ({sum: args.a + args.b}) }",  # RAGFlow's documented form
        "module.exports.main = async function (args) { await new Promise(r => setTimeout(r, 10)); return {sum: args.a + args.b} }",
        "module.exports = async ({a, b}) => ({sum: a + b})",  # module.exports = main
        "const main = ({a, b}) => ({sum: a + b});",  # a const, not exported
    ],
    ids=["function", "exports-object", "exports-main-async", "exports-function", "const"],
)
async def test_javascript_main_in_every_ragflow_form(client: Client, code: str):
    run = await client.run(code, JS, args={"a": 2, "b": 3})
    assert run.value == {"sum": 5}


async def test_javascript_streams_console_and_may_require_builtins(client: Client):
    code = "const path = require('path');\nfunction main({name}) { console.log('hi ' + name); console.error('warn'); return path.join('a', name) }"
    run = await client.run(code, JS, args={"name": "x"})
    assert run.stdout == "hi x\n" and run.stderr == "warn\n" and run.value == "a/x"


async def test_undefined_and_none_return_null(client: Client):
    assert (await client.run("function main() {}", JS)).result.value_json == "null"
    assert (await client.run("def main():\n    pass")).result.value_json == "null"


@pytest.mark.parametrize(
    "language,code,line",
    [(PY, "def main():\n    return 1\n\nx = (1,\n", 4), (JS, "function main() {\n  return 1\n}\nlet = = 2;", 4)],
    ids=["python", "javascript"],
)
async def test_syntax_error_names_the_line(client: Client, language: int, code: str, line: int):
    run = await client.run(code, language)
    assert not run.result.ok and run.kind == "ERROR_KIND_SYNTAX"
    assert run.result.error.line == line and f"line {line}" in run.result.error.message


async def test_python_exception_traceback_shows_user_frames_only(client: Client):
    code = "def helper(d):\n    return d['missing']\n\ndef main():\n    return helper({})\n"
    run = await client.run(code)
    err = run.result.error
    assert run.kind == "ERROR_KIND_EXCEPTION" and err.exception_type == "KeyError"
    assert err.line == 2 and err.message == "KeyError: 'missing' (line 2)"
    assert 'File "main.py", line 5, in main' in err.traceback and 'File "main.py", line 2, in helper' in err.traceback
    assert "boot" not in err.traceback and "<string>" not in err.traceback  # nothing of the sandbox's own code


async def test_javascript_exception_traceback_shows_user_frames_only(client: Client):
    code = "function helper(x) {\n  throw new TypeError('bad ' + x)\n}\nasync function main() { return helper(7) }\nmodule.exports = {main}"
    run = await client.run(code, JS)
    err = run.result.error
    assert run.kind == "ERROR_KIND_EXCEPTION" and err.exception_type == "TypeError"
    assert err.line == 2 and err.message.startswith("TypeError: bad 7")
    assert "main.js:2" in err.traceback and "node:internal" not in err.traceback and "[eval]" not in err.traceback


@pytest.mark.parametrize("language,code", [(PY, "x = 1"), (JS, "const x = 1")], ids=["python", "javascript"])
async def test_code_without_main_is_a_clear_error(client: Client, language: int, code: str):
    run = await client.run(code, language)
    assert run.kind == "ERROR_KIND_NO_MAIN" and "main" in run.result.error.message


async def test_non_json_return_value_is_a_clear_error(client: Client):
    run = await client.run("def main():\n    return {1, 2}")
    assert run.kind == "ERROR_KIND_BAD_RETURN" and "set" in run.result.error.message
    run = await client.run("function main() { return 10n }", JS)
    assert run.kind == "ERROR_KIND_BAD_RETURN"


async def test_python_exit_before_returning_is_reported(client: Client):
    run = await client.run("import sys\ndef main():\n    sys.exit(3)")
    assert run.kind == "ERROR_KIND_EXIT" and run.result.exit_code == 3


async def test_workdir_is_writable_and_private_to_the_run(client: Client):
    write = "import os\ndef main():\n    open('note.txt', 'w').write('x')\n    return sorted(os.listdir('.')) + [os.getcwd()]"
    assert (await client.run(write)).value == ["note.txt", "/sandbox"]
    # The next run starts from an empty directory again.
    assert (await client.run("import os\ndef main():\n    return os.listdir('.')")).value == []


@pytest.mark.parametrize(
    "request_kwargs,field",
    [
        (dict(code="def main(): pass", language=0), "language"),
        (dict(code="   "), "code is empty"),
        (dict(code="def main(): pass", arguments_json="[1, 2]"), "arguments_json"),
        (dict(code="def main(): pass", arguments_json="{not json"), "arguments_json"),
        (dict(code="def main(**k): pass", arguments_json='{"not an identifier": 1}'), "arguments_json"),
        (dict(code="def main(): pass", limits={"wall_time_ms": 10**9}), "limits.wall_time_ms"),
        (dict(code="def main(): pass", limits={"memory_bytes": -1}), "limits.memory_bytes"),
    ],
    ids=["language", "empty-code", "args-array", "args-invalid", "args-name", "limit-too-high", "limit-negative"],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(client: Client, request_kwargs: dict, field: str):
    from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb

    kwargs = {"language": PY, **request_kwargs}
    if "limits" in kwargs:
        kwargs["limits"] = sb_pb.Limits(**kwargs["limits"])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in client.stub.Execute(sb_pb.ExecuteRequest(**kwargs), timeout=10):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details() and err.value.details().startswith("sandbox:")


async def test_runs_in_parallel_do_not_mix_their_output(client: Client):
    code = "def main(tag):\n    for i in range(50):\n        print(tag, i)\n    return tag"
    runs = await asyncio.gather(*(client.run(code, args={"tag": f"t{i}"}) for i in range(4)))
    for i, run in enumerate(runs):
        assert run.value == f"t{i}"
        assert run.stdout.splitlines() == [f"t{i} {n}" for n in range(50)]


async def test_huge_return_value_is_refused_clearly(client: Client):
    run = await client.run("def main():\n    return 'x' * (6 << 20)")
    assert run.kind == "ERROR_KIND_OUTPUT_LIMIT" and "return value" in run.result.error.message


async def test_reading_stdin_gets_end_of_file_instead_of_hanging(client: Client):
    run = await client.run("def main():\n    return input()")
    assert run.kind == "ERROR_KIND_EXCEPTION" and run.result.error.exception_type == "EOFError"
    run = await client.run("function main() { return require('fs').readFileSync(0, 'utf8') }", JS)
    assert run.value == ""
