"""tests/teamrc/capture_metadata.py PORT LOG: a stand-in for a team's gRPC service
(here the remote downloader) on 127.0.0.1:PORT. For every call it appends the method
and the names of the metadata keys it carried to LOG, and answers UNIMPLEMENTED; it
exits after 300 s or when killed. run.sh checks that clonestage's token header is not
among them."""
import sys
import time
from concurrent import futures

import grpc


class Capture(grpc.GenericRpcHandler):
    def service(self, details):
        keys = sorted(k for k, _ in details.invocation_metadata)
        with open(sys.argv[2], "a") as f:
            f.write("%s %s\n" % (details.method, " ".join(keys)))
        return None  # grpc answers UNIMPLEMENTED


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[Capture()])
if server.add_insecure_port("127.0.0.1:" + sys.argv[1]) == 0:
    sys.exit("capture_metadata: cannot listen on 127.0.0.1:" + sys.argv[1])
server.start()
with open(sys.argv[2], "a") as f:
    f.write("listening\n")
time.sleep(300)
