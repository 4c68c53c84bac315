"""The file-serving workload of ULTra's Figure 2 (bench/run.sh figure2).

python3 bench/fileserve.py ROOT PORT PASSES: serves the files of ROOT
over HTTP on 127.0.0.1:PORT (Python's http.server, one request at a
time) to a client it forks, which fetches every file PASSES times in a
fixed order and checks their sizes; the server answers exactly that many
requests, then both end. Prints the requests made and the bytes read."""

import http.server
import os
import sys
import urllib.request


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    root, port, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    names = sorted(os.listdir(root))
    requests = len(names) * passes
    handler = lambda *a: Quiet(*a, directory=root)
    server = http.server.HTTPServer(("127.0.0.1", port), handler)
    child = os.fork()
    if child == 0:
        server.socket.close()
        total = 0
        for _ in range(passes):
            for name in names:
                url = f"http://127.0.0.1:{port}/{name}"
                with urllib.request.urlopen(url) as reply:
                    body = reply.read()
                if len(body) != os.path.getsize(os.path.join(root, name)):
                    print(f"short reply for {name}", file=sys.stderr)
                    os._exit(1)
                total += len(body)
        print(f"requests {requests} bytes {total}", flush=True)
        os._exit(0)
    for _ in range(requests):
        server.handle_request()
    server.server_close()
    _, status = os.waitpid(child, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


main()
