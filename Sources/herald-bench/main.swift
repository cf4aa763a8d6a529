import Glibc
import HeraldBench

// herald-bench: the benchmarks and load clients (Sources/HeraldBench), out of the production binary.
let code = await HeraldBench.run(Array(CommandLine.arguments.dropFirst()))
exit(code)
