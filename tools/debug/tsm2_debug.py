import torch, math, sys
sys.path.insert(0, "tests/tsm2x")
from pathlib import Path
from repro.tsm2x import tsm2
kd = Path("results/build/kernels")
def colmajor(rows, cols, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(cols, rows, device="cuda", dtype=dtype, generator=g).T
def err(C, A, B):
    ref = torch.mm(A.double(), B.double()); return ((C.double()-ref).abs().max()/ref.abs().max()).item()
for (m,k,n,dt,browmajor) in [(5000,100,7,torch.float64,True),(5000,100,7,torch.float64,False),(20000,300,8,torch.float32,False),(1000,370,3,torch.float32,False),(1037,203,7,torch.float64,False)]:
    A = colmajor(m,k,dt,1)
    B = torch.randn(k,n,device="cuda",dtype=dt) if browmajor else colmajor(k,n,dt,2)
    dflt = tsm2.default_variant("r", "f32" if dt==torch.float32 else "f64", m,k,n,132)
    res=[]
    for v in tsm2.candidates("r", "f32" if dt==torch.float32 else "f64", k, n):
        C1 = tsm2.tsm2r(A,B,variant=v.name,kernels_dir=kd); torch.cuda.synchronize()
        Cp = torch.full((n,m), math.nan, device="cuda", dtype=dt).T
        tsm2.tsm2r(A,B,out=Cp,variant=v.name,kernels_dir=kd); torch.cuda.synchronize()
        e1, e2 = err(C1,A,B), err(Cp,A,B)
        if e1>1e-4 or e2>1e-4 or math.isnan(e2): res.append(f"{v.name}: outNone={e1:.3g} outPoison={e2:.3g}")
    print(f"m={m} k={k} n={n} {dt} browmajor={browmajor} default={dflt.name} bad: {res if res else 'none'}")
