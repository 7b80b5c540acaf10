import sys, json
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:
        print(path, "unreadable", e); continue
    print(path, d["stage"], d["passed"], d["speedup"], d["reason"][:600], d["flags"], d["sandbox"], d["timing"][:200])
    for r in d.get("times", []):
        print("   ", r["shape"], round(r["candidate_ms"], 4), round(r["baseline_ms"], 4), r["method"], r["input_sets"])
