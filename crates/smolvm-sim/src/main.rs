fn main() {
    println!("smolvm-sim: not built yet");
    std::process::exit(1)
}
