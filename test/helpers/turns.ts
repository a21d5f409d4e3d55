/**
 * Counts turns of the event loop (setImmediate callbacks) from now until `stop()`: how often the
 * loop was free for other work while something ran. `turns` is live.
 */
export function countTurns(): { turns: number; stop(): number } {
  let turning = true;
  const counter = {
    turns: 0,
    stop() {
      turning = false;
      return counter.turns;
    },
  };
  const turn = () => {
    counter.turns++;
    if (turning) setImmediate(turn);
  };
  setImmediate(turn);
  return counter;
}
