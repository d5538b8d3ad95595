# Hit ratio of a least-frequently-used cache with the whole history of counts (every page ever
# seen, unbounded memory) over the suite's zipf trace, measured after its warm-up as the suite does:
# python3 2026-11-27-zipf-lfu.py TRACE WARM (TRACE from 2026-11-27-zipf-dump.patch, README).
import heapq, sys
from collections import defaultdict
tr=[int(x) for x in open(sys.argv[1])]
warm=int(sys.argv[2]); C=16384
def run(policy):
    freq=defaultdict(int); res={}; heap=[]; hits=0
    for i,p in enumerate(tr):
        freq[p]+=1
        if p in res:
            if i>=warm: hits+=1
            res[p]=freq[p]; heapq.heappush(heap,(freq[p],i,p)); continue
        if len(res)>=C:
            while True:
                f,j,q=heap[0]
                if res.get(q)==f: break
                heapq.heappop(heap)
            if policy=='tiny' and freq[p] <= f: continue
            heapq.heappop(heap); del res[q]
        res[p]=freq[p]; heapq.heappush(heap,(freq[p],i,p))
    return hits/(len(tr)-warm)
print(len(tr), "LFU (full history, always admit)", round(run('lfu'),4))
print("LFU (full history, admit if more frequent than the victim)", round(run('tiny'),4))
# The optimum for accesses drawn independently with known probabilities (A0: keep the C most
# probable pages), the expectation for this trace's sampler: Zipf 0.99 over 4 C pages.
w = [1 / (i + 1) ** 0.99 for i in range(4 * C)]
print("A0 (the C most probable pages, probabilities known)", round(sum(w[:C]) / sum(w), 4))
