import random, bisect, itertools
C=16384
# loop: 1.25C, 5 passes
L=C*5//4
with open('loop.txt','w') as f:
    for p in range(5):
        f.write('\n'.join(map(str,range(L)))+'\n')
# switch: two files 0.8C, A B A B, 4 passes each
S=C*4//5
with open('switch.txt','w') as f:
    for t in range(4):
        base = 0 if t%2==0 else 1_000_000
        for p in range(4):
            f.write('\n'.join(str(base+i) for i in range(S))+'\n')
# zipf 0.99 over 4C pages
N=4*C
w=[1.0/(i+1)**0.99 for i in range(N)]
cdf=list(itertools.accumulate(w)); tot=cdf[-1]
perm=list(range(N)); random.Random(7).shuffle(perm)
r=random.Random(11)
with open('zipf.txt','w') as f:
    out=[]
    for _ in range(6*C*2+C*8):
        out.append(perm[bisect.bisect_left(cdf, r.random()*tot)])
    f.write('\n'.join(map(str,out))+'\n')
